"""
The one config parser every script uses (nanoGPT lineage, made strict).

    python train.py config/looped.py --n_loop=4 --lr=3e-3

1. Each bare argument is a config file: plain Python, exec'd; every name it assigns must be a known key (names
   starting with _ and imported modules are the file's own). A config can build on another one beside it:
       import os
       exec(open(os.path.join(os.path.dirname(__file__), "base.py")).read())  # then assign what differs
2. Each --key=value overrides one key. Values are parsed with ast.literal_eval (so 3e-3, True, None, (1, 2)
   work) and fall back to a plain string ("--init_from=resume"). An integer key takes a whole number written as a
   float too (--max_tokens=1e9, --max_iters=2e4, also in config files).
3. Keys are the calling script's defaults plus the fields of the model config dataclass (GPTConfig). An unknown
   key or a value of the wrong type stops the script with a message naming the closest valid key.
4. --help lists every key with its default and the one-line comment written next to it in the source.

Scripts call it as
    cfg, model_cfg = configure(defaults, GPTConfig)
where `defaults` is a dict of the script's own keys (often `globals()` filtered to simple values).
"""
import ast
import dataclasses
import difflib
import inspect
import math
import os
import re
import sys
import traceback

SIMPLE_TYPES = (int, float, bool, str, tuple, list, type(None))


class ConfigError(SystemExit):
    """Raised (as a SystemExit with a readable message) for any bad config input."""


# A run stopped by a signal saves and exits with this code (checkpoint.py): it is not done, --resume continues it (a
# scheduler may requeue it). Here, in the light module every script imports, so that lab/sweep.py's jobs read it
# without importing torch.
EXIT_RESUMABLE = 75  # EX_TEMPFAIL


def cli_arg(key, value):
    """--key=value as the configurator reads it (strings raw, everything else as a Python literal)."""
    return f"--{key}={value}" if isinstance(value, str) else f"--{key}={value!r}"


def run(main, *args):
    """Run a script's main(); bad input (a ConfigError) ends it with its one line on stderr and exit code 2."""
    try:
        return main(*args)
    except ConfigError as e:
        print(e, file=sys.stderr)
        raise SystemExit(2)


def _comments(source_file, names):
    """One-line descriptions: the trailing `# comment` on the line that assigns each name in the source."""
    try:
        lines = open(source_file).read().splitlines()
    except (OSError, TypeError):
        return {}
    docs = {}
    for line in lines:
        m = re.match(r"^\s*([A-Za-z_]\w*)\s*(?::[^=]+)?=.*?#\s*(.*)$", line)
        if m and m.group(1) in names and m.group(1) not in docs:
            docs[m.group(1)] = m.group(2).strip()
    return docs


def _run_config_file(path):
    """The names a config file assigns (it is plain Python, exec'd); a file that cannot be read or run is one line
    naming it and the line that failed."""
    try:
        code = open(path, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config error: cannot read config file '{path}': {getattr(e, 'strerror', None) or e}")
    namespace = {"__file__": os.path.abspath(path)}  # a config may exec a file beside it, then change keys
    try:
        exec(compile(code, path, "exec"), namespace)
    except Exception as e:  # a syntax error, an exec'd file that is missing, ...: the file's own fault
        where = getattr(e, "lineno", None) or _failing_line(e, path)
        raise ConfigError(f"config error: config file '{path}'{f', line {where}' if where else ''}: "
                          f"{type(e).__name__}: {e}") from None
    return namespace


def _failing_line(error, path):
    """The line of the config file `path` where `error` was raised (None if it came from elsewhere)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == path]
    return frames[-1].lineno if frames else None


def _check_type(key, value, default):
    """Accept value if it fits the default's type; ints are fine where floats are expected, and a float that is a
    whole number (1e9, 2e4) where an int is (1.5 is not)."""
    if default is None:
        return value
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, int):
        if isinstance(value, float) and value.is_integer():  # integral scientific notation: --max_tokens=1e9
            value = int(value)
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, (tuple, list)):
        ok = isinstance(value, (tuple, list))
        value = type(default)(value) if ok else value
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise ConfigError(f"config error: --{key}={value!r} has type {type(value).__name__}, "
                          f"but {key} expects {type(default).__name__} (default {default!r})")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"config error: --{key}={value!r} must be a finite number")
    return value


def _unknown(key, known):
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
    hint = f"; did you mean '{close[0]}'?" if close else "; run with --help to list every key"
    return ConfigError(f"config error: unknown key '{key}'{hint}")


def _parse_value(text):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # a bare string such as --init_from=resume


def configure(defaults, model_cls=None, argv=None, doc_source=None, choices=None, usage=None):
    """Return (script config dict, model config instance or None) after config files and --key=value overrides.

    defaults: the script's own keys (simple values only; other entries such as modules are ignored).
    model_cls: a dataclass (GPTConfig) whose fields are also valid keys; the ValueError its __post_init__ raises
        for values that do not fit together becomes a ConfigError.
    doc_source: the file whose `# comments` describe the script keys (default: the caller's file).
    choices: {script key: allowed values} for the script's enum keys, checked here rather than when first used.
    usage: the command line --help shows (default: python <doc_source's file> [config/file.py ...] [--key=value ...]).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if doc_source is None:
        doc_source = defaults.get("__file__") or inspect.stack()[1].filename
    script = {k: v for k, v in defaults.items()
              if not k.startswith("_") and isinstance(v, SIMPLE_TYPES)}
    model_defaults = {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
                      for f in dataclasses.fields(model_cls)} if model_cls else {}
    clash = set(script) & set(model_defaults)
    assert not clash, f"script keys shadow model config fields: {sorted(clash)}"
    if "-h" in argv or "--help" in argv:
        print_help(script, model_defaults, doc_source, model_cls, usage)
        raise SystemExit(0)
    values = read_overrides(argv, {**script, **model_defaults})
    script.update({k: v for k, v in values.items() if k in script})
    for key, allowed in (choices or {}).items():
        if script[key] not in allowed:
            close = difflib.get_close_matches(str(script[key]), [str(a) for a in allowed], n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise ConfigError(f"config error: --{key}={script[key]!r} is not one of "
                              f"{' | '.join(map(str, allowed))}{hint}")
    if model_cls is None:
        return script, None
    try:
        return script, model_cls(**{k: v for k, v in values.items() if k in model_defaults})
    except ValueError as e:
        raise ConfigError(f"config error: {e}") from None


def read_overrides(argv, known):
    """{key: value} set by argv's config files and --key=value arguments, in order (a later one wins); every key
    must be known and every value of its default's type."""
    values = {}
    for arg in argv:
        if not arg.startswith("--"):
            pairs = [(key, value) for key, value in _run_config_file(arg).items()
                     if not (key.startswith("_") or inspect.ismodule(value) or callable(value))]
        elif "=" in arg:
            key, text = arg[2:].split("=", 1)
            key = key.replace("-", "_")
            # a string key takes the text as written (--dtypes=float32,bfloat16 or --compiles=False)
            pairs = [(key, text if isinstance(known.get(key), str) else _parse_value(text))]
        else:  # a bare --flag switches a boolean key on
            key = arg[2:].replace("-", "_")
            if key in known and not isinstance(known[key], bool):
                raise ConfigError(f"config error: '{arg}' needs a value, like {arg}=...")
            pairs = [(key, True)]
        for key, value in pairs:
            if key not in known:
                raise _unknown(key, list(known))
            values[key] = _check_type(key, value, known[key])
    return values


def print_help(script, model_defaults, doc_source, model_cls, usage=None):
    def section(title, keys, docs):
        print(title)
        width = max((len(k) for k in keys), default=0)
        for k, v in keys.items():
            print(f"  --{k.ljust(width)} = {v!r:<14} {docs.get(k, '')}")
    usage = usage or f"python {doc_source and doc_source.split('/')[-1]} [config/file.py ...] [--key=value ...]"
    print(f"usage: {usage}\n")
    section("script keys:", script, _comments(doc_source, script))
    if model_cls is not None:
        print()
        section(f"model keys ({model_cls.__name__}):", model_defaults,
                _comments(inspect.getsourcefile(model_cls), model_defaults))
