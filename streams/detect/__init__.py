"""The detect stage: raw events in, incidents and profiling commands out.

`app` wires it to Kafka: `ingest/` decodes raw messages into column chunks per job (`combine/`),
`engine` merges a job's chunks into step frames (`windows/`), runs the scopes (`scopes/`) and
rules (`rules/`, fed by `signals`) over them and keeps the incident books (`incidents/`);
`state/` snapshots each job's engine so a restart resumes where it stopped; `advice` says
what to check for a cause.
"""
