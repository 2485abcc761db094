"""docs/migration.md's "Key by key" table: every row names the tests that show it, and
each of those tests exists (a row whose test is renamed or deleted fails here)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def table_rows() -> list[list[str]]:
    text = (ROOT / "docs" / "migration.md").read_text()
    section = text.split("## Key by key", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows[1:]]  # past the header


def test_every_row_of_the_migration_table_names_tests_that_exist() -> None:
    rows = table_rows()
    keys = [row for row in rows if not row[0].startswith("**")]  # section rows are bold and empty
    assert len(keys) >= 35, len(keys)  # the parser found the table
    for row in keys:
        assert len(row) == 5, row
        named = TEST.findall(row[4])
        assert named, f"no test shows the row {row[0]!r}"
        for path, name in named:
            source = ROOT / path
            assert source.exists(), f"{row[0]!r}: {path} does not exist"
            assert re.search(rf"^(async )?def {name}\(", source.read_text(), re.M) or \
                re.search(rf"^    (async )?def {name}\(", source.read_text(), re.M), \
                f"{row[0]!r}: {path} has no test {name}"
