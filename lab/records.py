"""
The records' generated blocks: a table in records/*.md that is drawn from the JSON its committed command wrote,
never typed. In a record, a block reads

    <!-- generated from records/lee2026/early_exit_absolute.json comparisons: per seed=per_seed:+.3f | p=p:.3f -->
    | comparison | per seed | p |
    |---|---|---|
    | Looped&lt;Base@0.05 | +0.020 / +0.172 / +0.048 | 0.230 |
    <!-- end generated -->

The header names the JSON, the entry whose items are the table's rows (a dotted path; `.` for the whole file;
several joined by "," give their rows in turn) and the columns, each `heading=field:format` (a dotted path inside a
row, a number in it picks a list's item; a Python format spec; a list is formatted item by item and joined by
" / "; no format: the value as text; the last "=" ends the heading, so `M=1=1.mean:.2f` is headed M=1). Fields
joined by " ± " share a cell (`mean ± sd=mean:.3f ± sd:.3f`); a cell whose fields are all null or missing reads "–"
(a field that no row has is an error). The first column is the row's key (`heading=` with no field first names it;
"comparison" otherwise).

A block may read several JSONs (their paths joined by ","): then path 0.x is x in the first, 1.x in the second. An
entry `LABEL@PATH` gives PATH's rows with LABEL as a first key (a seed beside a layer): each `heading=` with no
field at the start names one part of the key (one heading: the parts joined by ", "); `LABEL#PATH` gives PATH itself
as one row named LABEL (a fit in a table of fits); "_" in a label reads as a space. A cell may be a template,
`heading={field:format} text {field:format}` (the "={" ends the heading), for several numbers in one cell; in a
template a field starting with "/" is a path from the top (`{/1.groups.$key.lr_opt:.1e}`: the same row's number in
the second JSON, $key being the row's own key and $label its entry's label: `none@0.none.groups` beside
`{/1.$label.groups.$key.lr_opt:.1e}` reads the other fit's rule of the same name). A JSON named `REV:PATH` is read
as commit REV holds it: the table of an earlier stage of a study (one seed of five) regenerates from the JSON as it
stood then.

A table of per-seed numbers (runs' validation losses, perplexities at each budget) is drawn from the JSON of
`python -m lab.fits table rows|exits|elastic ... --out=F.json`: per row and column, the values per seed (`per_seed`),
their `mean` and `sd`; with --reference=ROW the per-seed differences from that row (`d`, null for the row itself),
`d_mean` and `d_se`; with --relative_to=COLUMN the change from that column in percent (`pct`):

    <!-- generated from records/chen2026/ladder_table.json .: rung= | seed 1337=val_loss.per_seed.0:.3f | ...
         mean ± sd=val_loss.mean:.3f ± val_loss.sd:.3f | vs Vanilla, paired by seed=val_loss.d:+.3f | ... -->

With `fits.py table rows ... --column=lr` the columns are the LRs of the rows, and a key that holds dots is matched
whole: `1e-3=0.001.per_seed:.3f` draws the seeds' losses at LR 0.001.

    python -m lab.records            rewrite every block of records/*.md from its JSON
    python -m lab.records --check    exit 1 naming each block that differs from its JSON (tests/test_records.py)

The JSON itself names the command that wrote it, the code's commit and its inputs' sha256 (runs.provenance);
tests/test_records.py reruns the fast commands and compares.
"""
import glob
import json
import os
import re
import subprocess
import sys

BLOCK = re.compile(r"<!-- generated from (\S+) (\S+): (.*?) -->\n(.*?)<!-- end generated -->", re.S)


def lookup(obj, path):
    """obj[a][b]... for the dotted path "a.b" ("." is obj itself; a number picks a list's item; a key that holds dots,
    a column's LR 0.001, is matched whole: 0.001.per_seed is obj["0.001"]["per_seed"], the longest key first)."""
    keys = [] if path == "." else path.split(".")
    while keys:
        if isinstance(obj, list):
            obj, keys = obj[int(keys[0])], keys[1:]
            continue
        n = next((n for n in range(len(keys), 1, -1) if ".".join(keys[:n]) in obj), 1)
        obj, keys = obj[".".join(keys[:n])], keys[n:]
    return obj


def found(obj, path, seen, field=None):
    """lookup, or None where the row lacks the field (a model trained at M=1 has no budget 2); seen collects the
    fields (as the header writes them) that some row has."""
    try:
        value = lookup(obj, path)
    except (KeyError, IndexError):
        return None
    seen.add(field or path)
    return value


def cell(value, fmt):
    if isinstance(value, list):
        return " / ".join(cell(v, fmt) for v in value)
    if value is None:
        return "–"
    return format(value, fmt) if fmt else str(value)


TEMPLATE_FIELD = re.compile(r"\{([^{}:]+):?([^{}]*)\}")


def fill(template, row, numbers, key, seen, label=""):
    """A template cell: each {field:format} drawn from the row (a field from "/": from the top, $key the row's key,
    $label its entry's label)."""
    def one(m):
        field, fmt = m.group(1).replace("$key", key).replace("$label", label), m.group(2)
        obj, path = (numbers, field[1:]) if field.startswith("/") else (row, field)
        return cell(found(obj, path, seen, m.group(1)), fmt)
    return TEMPLATE_FIELD.sub(one, template)


def render(numbers, rows_path, columns, first="comparison"):
    """The markdown table of the block header's rows and columns, from the JSON's numbers."""
    spec = []
    for c in columns.split("|"):
        if "={" in c:  # a template cell
            heading, template = c.strip().split("={", 1)
            spec.append((heading, "{" + template))
        else:
            heading, fields = c.strip().rpartition("=")[::2]
            spec.append((heading, [f.partition(":")[::2] for f in fields.split(" ± ")]))
    keys = []
    while spec and spec[0][1] == [("", "")]:  # "heading=" first: the headings of the rows' keys
        keys.append(spec.pop(0)[0])
    keys = keys or [first]
    lines = ["| " + " | ".join(keys + [h for h, _ in spec]) + " |", "|---" * (len(spec) + len(keys)) + "|"]
    seen = [set() for _ in spec]  # a field a row lacks reads "–"; a field no row has is a mistake in the header
    for part in rows_path.split(","):
        if "#" in part:  # LABEL#PATH: PATH is one row, named LABEL ($key in its templates)
            key, part = part.split("#")
            entries, raw, shown = {key: lookup(numbers, part)}, "", key.replace("_", " ")
        else:
            raw, _, part = part.rpartition("@")
            entries, shown = lookup(numbers, part), None
        label = raw.replace("_", " ")
        for key, row in entries.items():
            if key == "provenance":
                continue
            names = [label, key] if label else [shown or key]
            cells = [n.replace("<", "&lt;") for n in (names if len(keys) > 1 else [", ".join(names)])]
            for (_, fields), hits in zip(spec, seen):
                if isinstance(fields, str):
                    cells.append(fill(fields, row, numbers, key, hits, raw))
                    continue
                values = [found(row, field, hits) for field, _ in fields]
                cells.append(" ± ".join(cell(v, fmt) for v, (_, fmt) in zip(values, fields))
                             if any(v is not None for v in values) else "–")
            lines.append("| " + " | ".join(cells) + " |")
    for (heading, fields), hits in zip(spec, seen):
        wanted = TEMPLATE_FIELD.findall(fields) if isinstance(fields, str) else fields
        if {field for field, _ in wanted} - hits:
            raise KeyError(f"the column {heading!r}: no row has {sorted({f for f, _ in wanted} - hits)}")
    return "\n".join(lines) + "\n"


def load(paths):
    """The numbers a block reads: its JSON, or the list of its JSONs where it names several (joined by ","); REV:PATH
    is the JSON as commit REV holds it (a table of a study's earlier stage, whose JSON was refitted since)."""
    files = []
    for path in paths.split(","):
        rev, _, path = path.rpartition(":")
        if rev:
            shown = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True)
            if shown.returncode:
                raise SystemExit(f"records.py: no {path} at commit {rev} in this clone (a shallow clone lacks the "
                                 f"commit: git fetch --unshallow): {shown.stderr.strip()}")
            files.append(json.loads(shown.stdout))
            continue
        with open(path) as f:
            files.append(json.load(f))
    return files[0] if len(files) == 1 else files


def blocks(text):
    """(match, the block as its JSON draws it) for every generated block of a record's text."""
    for m in BLOCK.finditer(text):
        paths, rows_path, columns, _ = m.groups()
        yield m, render(load(paths), rows_path, columns)


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
        print(f"usage: python -m lab.records [--check] (not {' '.join(argv)!r})", file=sys.stderr)
        return 2
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # block headers name files from the root
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
