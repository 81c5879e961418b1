"""The `idemcore serve` section of docs/broker.md (once the README's) runs as written (against a server on a
free port instead of 9092)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "docs" / "broker.md"


def _section_blocks() -> list[str]:
    text = README.read_text()
    section = text[text.index("## A Kafka broker: `idemcore serve`"):]
    section = section[:section.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_readme_snippets_run_against_a_served_broker(kafka_server, capsys):
    blocks = _section_blocks()
    assert len(blocks) == 3, "the section's snippets changed: update this test"
    for block in blocks:
        code = block.replace("127.0.0.1:9092", kafka_server.bootstrap)
        exec(compile(code, str(README), "exec"), {})  # our own README
    assert "[b'order 42']" in capsys.readouterr().out
    assert kafka_server.broker.topic_configs["orders"].segment_bytes == 16_777_216  # the topic configs' snippet
    assert kafka_server.stats["broker_errors"] == 0 and kafka_server.stats["malformed"] == 0
