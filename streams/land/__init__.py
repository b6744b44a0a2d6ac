"""The land stage: every event and incident into ClickHouse, bad input to the dead-letter topic.

`app` is the worker; `loop` the consumer thread (poll, process, land, commit); `processor` turns
raw messages into table rows, pure; `lander` writes rows to the sink (the parse worker lands its
profile rows through it too).
"""
