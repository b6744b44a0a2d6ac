"""The Alertmanager bridge: incidents from the incidents topic to Alertmanager's v2 API.

`mapping` turns one incident into an alert (pure), `book` keeps the firing ones and says what
to post when (pure), `client` posts (HTTP), `bridge` runs the consumer loop around them.
"""
