"""
The records' generated blocks: a table in records/*.md that is drawn from the JSON its committed command wrote,
never typed. In a record, a block reads

    <!-- generated from records/lee2026/early_exit_absolute.json comparisons: per seed=per_seed:+.3f | p=p:.3f -->
    | comparison | per seed | p |
    |---|---|---|
    | Looped&lt;Base@0.05 | +0.020 / +0.172 / +0.048 | 0.230 |
    <!-- end generated -->

The header names the JSON, the entry whose items are the table's rows (a dotted path; `.` for the whole file)
and the columns, each `heading=field:format` (a dotted path inside a row, a Python format spec; a list is
formatted item by item and joined by " / "; no format: the value as text). The first column is the row's key
(`heading=` with no field first names it; "comparison" otherwise).

    python records.py            rewrite every block of records/*.md from its JSON
    python records.py --check    exit 1 naming each block that differs from its JSON (tests/test_records.py)

The JSON itself names the command that wrote it, the code's commit and its inputs' sha256 (fits.provenance);
tests/test_records.py reruns the fast commands and compares.
"""
import glob
import json
import os
import re
import sys

BLOCK = re.compile(r"<!-- generated from (\S+) (\S+): (.*?) -->\n(.*?)<!-- end generated -->", re.S)


def lookup(obj, path):
    """obj[a][b]... for the dotted path "a.b" ("." is obj itself)."""
    for key in ([] if path == "." else path.split(".")):
        obj = obj[key]
    return obj


def cell(value, fmt):
    if isinstance(value, list):
        return " / ".join(cell(v, fmt) for v in value)
    if value is None:
        return "–"
    return format(value, fmt) if fmt else str(value)


def render(numbers, rows_path, columns, first="comparison"):
    """The markdown table of the block header's rows and columns, from the JSON's numbers."""
    spec = [c.strip().partition("=") for c in columns.split("|")]
    spec = [(heading, *field.partition(":")[::2]) for heading, _, field in spec]
    if spec[0][1] == "":  # "heading=" first: the heading of the rows' keys
        first = spec.pop(0)[0]
    lines = ["| " + " | ".join([first] + [h for h, _, _ in spec]) + " |", "|---" * (len(spec) + 1) + "|"]
    for key, row in lookup(numbers, rows_path).items():
        if key == "provenance":
            continue
        cells = [key.replace("<", "&lt;")] + [cell(lookup(row, field), fmt) for _, field, fmt in spec]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def blocks(text):
    """(match, the block as its JSON draws it) for every generated block of a record's text."""
    for m in BLOCK.finditer(text):
        path, rows_path, columns, _ = m.groups()
        with open(path) as f:
            yield m, render(json.load(f), rows_path, columns)


def regenerate(text):
    """The record's text with every generated block redrawn from its JSON."""
    out, end = [], 0
    for m, table in blocks(text):
        out += [text[end:m.start(4)], table]
        end = m.end(4)
    return "".join(out) + text[end:]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    check = argv == ["--check"]
    if argv and not check:
        print("usage: python records.py [--check]", file=sys.stderr)
        return 2
    os.chdir(os.path.dirname(os.path.abspath(__file__)))  # block headers name files from the project root
    stale = []
    for record in sorted(glob.glob("records/*.md")):
        with open(record) as f:
            text = f.read()
        new = regenerate(text)
        if new != text:
            stale.append(record)
            if not check:
                with open(record, "w") as f:
                    f.write(new)
    for record in stale:
        print(f"{record}: {'a generated block differs from its JSON' if check else 'rewritten'}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
