"""Rules R1–R10 of the spec (§2), one module per rule, pure and vectorised over series.

Every rule is `evaluate(inputs..., state | None, params) -> (state, Alarms)`: `state` is
plain data (numpy arrays) sized to the series it follows, created on the first call;
NaN input means "no sample" and leaves that series untouched. No I/O, no clock.
"""
