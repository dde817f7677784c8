"""An answer printed on an 80-column terminal: prose wraps between words, table cells keep
their words whole, commands stay one line each (so they copy whole), and piped output is one
``key=value`` per line (tests/fixtures/answers holds a real answer document of the shipped
knowledge: the 8B on the H200 at 60 req/s)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from advisor.answers.document import Answer
from advisor.cli.answer_view import answer_lines, print_answer

FIXTURE = Path(__file__).parents[1] / "fixtures" / "answers" / "vllm-8b-h200-60rps.json"


@pytest.fixture(scope="module")
def answer() -> Answer:
    return Answer.model_validate(json.loads(FIXTURE.read_text()))


def _render(answer: Answer, *, width: int, terminal: bool, explain: bool) -> str:
    console = Console(width=width, force_terminal=terminal, color_system=None, record=True,
                      file=open("/dev/null", "w"))  # noqa: SIM115 - closed with the console
    print_answer(console, answer, explain=explain)
    return console.export_text()


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[\s│┃]+", text) if w]


@pytest.mark.parametrize("explain", [False, True])
def test_at_80_columns_no_word_is_split(answer: Answer, explain: bool) -> None:
    out = _render(answer, width=80, terminal=True, explain=explain)
    commands = {c for c in (answer.launch_command, answer.next.tune_command) if c}
    lines = out.splitlines()
    for line in lines:
        assert len(line) <= 80 or line.strip() in commands, line
    for command in commands:  # whole, on one line
        assert any(line.strip() == command for line in lines)
    flat = " ".join(out.split())
    # Prose wraps only between words: each sentence reads whole once the line breaks are spaces.
    for prose in (answer.summary, answer.confidence.reason):
        assert " ".join(prose.split()) in flat
    # Every word of every figure, bound and evidence cell is whole somewhere in the output.
    tokens = set(_words(out))
    cells = [m for m in answer.figures] + answer.question.slo.split(",")
    cells += [f"{k}={v}" for k, v in (answer.config or {}).items() if k == "quantization"]
    if explain:
        cells += [str(e.trial_id) for e in answer.evidence]
    for cell in cells:
        assert cell in tokens, cell


def test_piped_output_is_one_key_value_per_line(answer: Answer) -> None:
    out = _render(answer, width=80, terminal=False, explain=False)
    lines = out.splitlines()
    assert lines == list(answer_lines(answer))
    assert all(re.match(r"^[a-z_.0-9]+=", line) for line in lines)
    assert "config.quantization=fp8" in lines
