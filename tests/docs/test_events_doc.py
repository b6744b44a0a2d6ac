"""docs/events.md must stay true: every JSON example in it decodes under the contract."""

import re
from pathlib import Path

from schemas import EVENT_TYPES, decode

DOC = Path(__file__).resolve().parents[2] / "docs" / "events.md"


def test_every_event_type_has_a_decodable_example() -> None:
    blocks = re.findall(r"```json\n(.*?)```", DOC.read_text(), flags=re.S)
    decoded = [decode(block.encode()) for block in blocks]
    assert {type(e).TYPE for e in decoded} == set(EVENT_TYPES)
