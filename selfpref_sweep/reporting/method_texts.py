"""The report's method prose, kept as Markdown files beside the code that shows it: analysis/report/texts/<name>.md
for the core's sections, measurements/<name>/texts/<text>.md for a measurement's. A researcher edits the words there
without touching code. A file is wrapped for reading: a single line break inside a paragraph is a space, a blank
line separates paragraphs. `${name}` marks a value the section fills in (string.Template)."""

from __future__ import annotations

import functools
from importlib import resources
from string import Template


@functools.cache
def _raw(package: str, name: str) -> str:
    text = resources.files(package).joinpath("texts", f"{name}.md").read_text(encoding="utf-8")
    return "\n\n".join(" ".join(p.split()) for p in text.strip().split("\n\n"))


def method_text(name: str, package: str, **values: object) -> str:
    """The text `name` of `package` (its texts/<name>.md), with its ${...} filled from `values`."""
    text = _raw(package, name)
    return Template(text).substitute({k: str(v) for k, v in values.items()}) if values else text
