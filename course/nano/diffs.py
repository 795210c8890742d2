"""
The diffs between the steps of course/nano: each file against the one it builds on, which is what the step adds.

    python course/nano/diffs.py           # prints them
    python course/nano/diffs.py --write   # writes them into course/nano/README.md's diff blocks

tests/test_course_nano.py checks that the README shows exactly what this prints, so the text never drifts from
the files.
"""
import difflib
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
STEPS = {"loop": "gpt", "prelude": "loop", "moe": "loop", "exit": "loop", "iteradaln": "loop"}  # each step -> the step it builds on
BLOCK = re.compile(r"(<!-- diff (\w+)\.py -->\n```diff\n)(.*?)(```\n)", re.S)  # a README diff block


def diff(step):
    """The unified diff of step.py against the file it builds on."""
    parent = STEPS[step]
    old = (HERE / f"{parent}.py").read_text().splitlines(keepends=True)
    new = (HERE / f"{step}.py").read_text().splitlines(keepends=True)
    return "".join(difflib.unified_diff(old, new, f"{parent}.py", f"{step}.py"))


def changed_lines(step):
    """Lines removed plus lines added by the step (the diff's file headers not counted)."""
    lines = diff(step).splitlines()
    return sum(1 for line in lines if line[:1] in "+-" and line[:3] not in ("+++", "---"))


def readme_blocks(text):
    """{step: the diff its README block shows}."""
    return {m.group(2): m.group(3) for m in BLOCK.finditer(text)}


def main(argv):
    if argv == ["--write"]:
        readme = HERE / "README.md"
        readme.write_text(BLOCK.sub(lambda m: m.group(1) + diff(m.group(2)) + m.group(4), readme.read_text()))
        print(f"wrote the diffs of {', '.join(STEPS)} into {readme}")
    elif not argv:
        for step in STEPS:
            print(diff(step))
    else:
        sys.exit("usage: python course/nano/diffs.py [--write]")


if __name__ == "__main__":
    main(sys.argv[1:])
