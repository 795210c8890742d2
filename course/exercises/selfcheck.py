"""What the self-checks of Lectures 5-10's exercises share. Those exercises edit the project's own files, so a
self-check imports the project (the folder given on its command line, by default this repository) and tests what
your edit does against values computed independently of it, one PASS or FAIL line per check (a crash fails its
check, not the script), then exits 0 only if every check passed."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def use_project(argv):
    """Put the project folder (argv[0], else this repository) first on the import path: `import moe` is yours."""
    folder = Path(argv[0]).resolve() if argv else ROOT
    sys.path.insert(0, str(folder))
    return folder


class Checks:
    def __init__(self):
        self.results = []

    def __call__(self, name, fn):
        """Run fn() -> (passed, detail) and print its verdict; returns whether it passed."""
        try:
            ok, detail = fn()
        except Exception as e:  # a crash is a failure of that check, not of the script
            ok, detail = False, f"{type(e).__name__}: {e}"
        self.results.append(bool(ok))
        print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f"\n      {detail}" if detail else ""))
        return ok

    def not_run(self, names, reason):
        """Checks that need one that failed: each a FAIL line saying why."""
        for name in names:
            self.results.append(False)
            print(f"FAIL  {name}: not run ({reason})")

    def status(self):
        print(f"{sum(self.results)} of {len(self.results)} checks passed")
        return 0 if all(self.results) else 1
