"""README.md: its examples run as written, its commands name things that exist.

Every ```python block runs in a fresh interpreter (this test's, with this
test's environment: the installed package, or the source tree with
DEEPREDUCE_TF_OPS_LIB), in an empty directory, and its output is checked
against numbers computed here independently (dense bytes from the layer
sizes, top-k positions from tf.math.top_k in the example itself, ...). Each
block is matched to exactly one check by what it calls, and each check to
exactly one block, so an example cannot be added, or an adoption path
dropped, without this file noticing. A block preceded by the line
`<!-- readme-test: skip -->` is not run (none is today).

Every ```bash block is checked without running anything slow: each command
is a script of this repository with a job it accepts, or a console script of
setup.py whose flags deepreduce-bench defines, with values that parse and
presets that exist. Relative links of README.md and docs/*.md point at files
and headings that exist, and the README stays at most MAX_LINES long.
"""
import importlib.util
import os
import re
import shlex
import signal
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(REPO_ROOT, "README.md")
DOCS = os.path.join(REPO_ROOT, "docs")
MAX_LINES = 250
SKIP_MARK = "<!-- readme-test: skip -->"
EXAMPLE_TIMEOUT_S = 600
# absl's help flags: handled by absl.app, not defined in deepreduce-bench's FlagValues.
HELP_FLAGS = ("help", "helpfull", "helpshort")

# The model of the Keras examples: Dense(64 -> 256) + Dense(256 -> 10), float32.
KERAS_EXAMPLE_DENSE_BYTES = 4 * (64 * 256 + 256 + 256 * 10 + 10)


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def code_blocks(text, lang):
    """[(line number, code, skipped)] of the fenced ```lang blocks of text."""
    lines = text.split("\n")
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```" + lang:
            start = i
            previous = next((l.strip() for l in reversed(lines[:i]) if l.strip()), "")
            i += 1
            body = []
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            assert i < len(lines), f"README.md:{start + 1}: unterminated ```{lang} block"
            blocks.append((start + 1, "\n".join(body) + "\n", previous == SKIP_MARK))
        i += 1
    return blocks


README_TEXT = _read(README)
PYTHON_BLOCKS = code_blocks(README_TEXT, "python")
BASH_BLOCKS = code_blocks(README_TEXT, "bash")


# ------------------------------------------------------------- the README's size

def test_readme_is_short():
    n = README_TEXT.count("\n")
    assert n <= MAX_LINES, (f"README.md has {n} lines, more than {MAX_LINES}: move the depth "
                            "into docs/ and link it")


def test_readme_has_no_unknown_fences():
    """Every fenced block is python, bash or plain text, so every example is checked."""
    langs = re.findall(r"^```(\S*)\s*$", README_TEXT, flags=re.M)
    # openings and closings alternate: the openings are the even entries
    openings = langs[0::2]
    assert not [l for l in openings if l not in ("python", "bash", "text")], openings


# ------------------------------------------------------------- python examples

def _example_env():
    env = dict(os.environ)
    # the example runs elsewhere: relative PYTHONPATH entries become absolute
    if env.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(
            os.path.abspath(p) for p in env["PYTHONPATH"].split(os.pathsep) if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def run_example(code, workdir, name):
    """Runs code as workdir/name with this interpreter; returns (rc, output).
    The example and whatever it starts (worker processes) share a new session,
    killed as a whole on timeout."""
    path = os.path.join(workdir, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(code)
    proc = subprocess.Popen([sys.executable, path], cwd=workdir, env=_example_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=EXAMPLE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{name} did not finish in {EXAMPLE_TIMEOUT_S} s; output:\n{out[-4000:]}")
    return proc.returncode, out


def _match(pattern, out):
    m = re.search(pattern, out)
    assert m, f"expected a line matching {pattern!r} in the output:\n{out[-4000:]}"
    return m


def check_python_api(out):
    m = _match(r"dense (\d+) B, sent (\d+) B, reduction (\d+)x", out)
    dense, sent, shown = int(m.group(1)), int(m.group(2)), int(m.group(3))
    assert dense == 100_000 * 4  # the example's float32 tensor
    assert 0 < sent * 50 < dense  # top-k 1 %, coded: well under 2 % of dense
    assert shown == round(dense / sent)
    # the example compares the decoded positions with tf.math.top_k's
    _match(r"positions = exact top-k: True", out)
    err = float(_match(r"relative error of the kept values: ([0-9.]+)", out).group(1))
    assert err < 0.02  # QSGD 7 bit: at most half a step of 1/127 of the max per value


def check_mirrored_fit(out):
    m = _match(r"accuracy ([0-9.]+) -> ([0-9.]+)", out)
    assert float(m.group(2)) > float(m.group(1)), "training did not improve accuracy"
    m = _match(r"(\d+) replicas; per step: dense (\d+) B, sent (\d+) B, reduction ([0-9.]+)x",
               out)
    replicas, dense, sent, ratio = (int(m.group(1)), int(m.group(2)), int(m.group(3)),
                                    float(m.group(4)))
    assert replicas == 2
    assert dense == KERAS_EXAMPLE_DENSE_BYTES  # every gradient went through the compressor
    assert 0 < sent * 10 < dense
    assert ratio == pytest.approx(dense / sent, rel=0.01, abs=0.06)


def check_mwms_fit(out):
    m = _match(r"worker 0: (\d+) steps, accuracy ([0-9.]+) -> ([0-9.]+), dense (\d+) B, "
               r"sent (\d+) B, reduction ([0-9.]+)x", out)
    steps, first, last = int(m.group(1)), float(m.group(2)), float(m.group(3))
    dense, sent, ratio = int(m.group(4)), int(m.group(5)), float(m.group(6))
    assert steps == 2 * 1024 // 32  # 2 epochs of 1,024 examples in batches of 32
    assert last > first, "training did not improve accuracy"
    # every step exchanged at least the model's gradients (tf_keras adds a few scalars)
    assert dense >= steps * KERAS_EXAMPLE_DENSE_BYTES
    assert 0 < sent * 10 < dense
    assert ratio == pytest.approx(dense / sent, rel=0.01, abs=0.06)


# (check name, how its block is recognised, check, modules the example needs)
PYTHON_CHECKS = [
    ("python_api", lambda code: "from_params(" in code and "distribute" not in code,
     check_python_api, ()),
    ("mirrored_fit", lambda code: "DeepReduceCrossDeviceOps(" in code, check_mirrored_fit, ()),
    ("mwms_fit", lambda code: "multi_worker_strategy(" in code, check_mwms_fit, ("tf_keras",)),
]


def test_every_python_block_has_one_check():
    for line, code, skipped in PYTHON_BLOCKS:
        if skipped:
            continue
        names = [name for name, recognise, _, _ in PYTHON_CHECKS if recognise(code)]
        assert len(names) == 1, (f"README.md:{line}: a ```python block must match exactly one "
                                 f"check of tests/test_readme.py, matched {names}; add a check "
                                 f"or mark it with {SKIP_MARK!r}")


@pytest.mark.parametrize("name,recognise,check,needs", PYTHON_CHECKS,
                         ids=[c[0] for c in PYTHON_CHECKS])
def test_python_example_runs(name, recognise, check, needs, tmp_path):
    blocks = [(line, code) for line, code, skipped in PYTHON_BLOCKS
              if not skipped and recognise(code)]
    assert len(blocks) == 1, f"README.md should hold exactly one {name} example, found {blocks}"
    for module in needs:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (bash build_deps/dev.sh setup installs it)")
    line, code = blocks[0]
    rc, out = run_example(code, str(tmp_path), f"readme_{name}.py")
    assert rc == 0, f"README.md:{line} ({name}) exited with {rc}; output:\n{out[-4000:]}"
    check(out)


# ------------------------------------------------------------- bash commands

def _console_scripts():
    """{name: 'module:function'} of setup.py's console_scripts."""
    return dict(re.findall(r'"([\w-]+) = ([\w.]+:\w+)"', _read(os.path.join(REPO_ROOT,
                                                                           "setup.py"))))


def _script_jobs(script):
    """The jobs a `case "$job" in` script accepts (build_deps/dev.sh)."""
    text = _read(script)
    m = re.search(r'case "\$job" in\n(.*?)\nesac', text, flags=re.S)
    assert m, f"{script}: no `case \"$job\" in` block"
    return set(re.findall(r"^\s*([\w-]+)\)", m.group(1), flags=re.M))


def _commands(code):
    """[(line, argv)] of a bash block: comments stripped, VAR=value prefixes dropped."""
    out = []
    for i, text in enumerate(code.split("\n")):
        argv = shlex.split(text, comments=True)
        while argv and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[0]):
            argv = argv[1:]
        if argv:
            out.append((i, argv))
    return out


def check_bash_script(argv, where):
    assert len(argv) >= 2, f"{where}: `bash` without a script"
    script = os.path.join(REPO_ROOT, argv[1])
    assert os.path.isfile(script), f"{where}: {argv[1]} is not a file of the repository"
    if len(argv) > 2:
        jobs = _script_jobs(script)
        assert argv[2] in jobs, f"{where}: {argv[1]} has no job {argv[2]!r} (jobs: {jobs})"


def check_deepreduce_bench(argv, where):
    from absl import flags as absl_flags

    from deepreduce_bench import flags as bench_flags
    from deepreduce_bench import presets

    fv = absl_flags.FlagValues()
    bench_flags.define_flags(fv)
    args = []
    for arg in argv[1:]:
        assert arg.startswith("--"), f"{where}: {arg!r} is not a --flag"
        name = arg[2:].split("=", 1)[0]
        if name in HELP_FLAGS:
            continue
        known = name in fv or (name.startswith("no") and name[2:] in fv)
        assert known, f"{where}: deepreduce-bench defines no flag --{name}"
        args.append(arg)
    try:
        fv([argv[0]] + args)  # types of the values
    except absl_flags.Error as e:
        raise AssertionError(f"{where}: {e}") from e
    if fv["compare"].present:
        unknown = [p for p in fv.compare if p not in presets.PRESETS]
        assert not unknown, f"{where}: no preset {unknown}; presets: {presets.names_text()}"
    try:  # ranges and combinations, as the command checks them before any work
        bench_flags.resolve(fv)
    except bench_flags.ConfigError as e:
        raise AssertionError(f"{where}: {e}") from e


def check_command(argv, where):
    program = argv[0]
    if program == "bash":
        check_bash_script(argv, where)
        return
    name = os.path.basename(program)
    scripts = _console_scripts()
    assert name in scripts, (f"{where}: {program} is neither `bash <script>` nor a console "
                             f"script of setup.py ({sorted(scripts)}); teach "
                             "tests/test_readme.py to check it")
    if program != name:
        assert program == f".venv/bin/{name}", f"{where}: run {name} from .venv/bin/"
    checks = {"deepreduce-bench": check_deepreduce_bench}
    assert name in checks, f"{where}: tests/test_readme.py has no check of {name}'s arguments"
    checks[name](argv, where)


def test_bash_blocks_exist():
    assert BASH_BLOCKS, "README.md has no ```bash block (the two commands)"
    two = [c for _, code, _ in BASH_BLOCKS for _, c in _commands(code)
           if c[:2] == ["bash", "build_deps/dev.sh"]]
    assert sorted(c[2] for c in two) == ["bench", "test"], two


@pytest.mark.parametrize("line,code,skipped", BASH_BLOCKS,
                         ids=[f"line{b[0]}" for b in BASH_BLOCKS])
def test_bash_block_names_real_things(line, code, skipped):
    if skipped:
        pytest.skip(f"README.md:{line} is marked {SKIP_MARK!r}")
    commands = _commands(code)
    assert commands, f"README.md:{line}: an empty ```bash block"
    for i, argv in commands:
        check_command(argv, f"README.md:{line + 1 + i}")


def test_bash_check_rejects_wrong_commands():
    """The checks above can fail: misspelt flags, presets, jobs and scripts."""
    bad = [["bash", "build_deps/dev.sh", "bnech"], ["bash", "build_deps/nope.sh"],
           [".venv/bin/deepreduce-bench", "--compres_ratio=0.01"],
           [".venv/bin/deepreduce-bench", "--num_batches=ten"],
           [".venv/bin/deepreduce-bench", "--compare=uncompressed,golomb_qsgd8"],
           [".venv/bin/deepreduce-bench", "--compare=uncompressed", "--index=golomb"],
           [".venv/bin/deepreduce-bench", "--compress_ratio=1.5"],
           ["deepreduce-benchmark"]]
    for argv in bad:
        with pytest.raises(AssertionError):
            check_command(argv, "test")


# ------------------------------------------------------------- parameter table

def _parameter_rows():
    """[[key cell, values cell, default cell, meaning]] of the README's parameter table."""
    section = README_TEXT.split("\n## Parameters\n", 1)[1].split("\n## ", 1)[0]
    rows = [l for l in section.split("\n") if l.startswith("| `")]
    # cells are separated by unescaped pipes (\| is a pipe inside a cell)
    return [[c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))] for row in rows]


def _first_value(cell):
    return cell.replace("`", "").split()[0].rstrip(",")


def test_parameter_table_matches_from_params():
    from deepreduce_tf import compressor, params
    from deepreduce_tf.codecs import base

    rows = _parameter_rows()
    assert rows, "README.md: no parameter table under '## Parameters'"
    declared = {**base.REGISTRY.params(),
                **{p.key: p for p in (params.TOPK_SCOPE, params.TOPK_SKIP_ZEROS,
                                      params.BUCKET_CAP_MB)}}
    seen = []
    for cells in rows:
        assert len(cells) == 4, f"README.md parameter table: a row of {len(cells)} cells: {cells}"
        keys = re.findall(r"`([^`]+)`", cells[0])
        unknown = [k for k in keys if k not in params.keys()]
        assert not unknown, f"README.md parameter table: {unknown} are not from_params keys"
        seen += keys
        if len(keys) != 1:
            continue
        key, values = keys[0], set(re.findall(r"`([^`]+)`", cells[1]))
        if key in ("index", "value"):
            assert values == set(base.REGISTRY.names(key)), (key, values)
        param = declared.get(key)
        if param is None and key != "min_size":
            continue
        if param is not None and param.choices:
            assert values == set(param.choices), (key, values, param.choices)
        default = compressor.DEFAULT_MIN_SIZE if param is None else param.default
        shown = _first_value(cells[2])
        if default is None:
            assert shown == "unset", (key, cells[2])
        elif isinstance(default, (str, bool)):
            assert shown == str(default), (key, cells[2], default)
        else:
            assert float(shown) == default, (key, cells[2], default)
    missing = set(params.GENERAL_KEYS) - set(seen)
    assert not missing, f"README.md parameter table lacks {sorted(missing)}"


# ------------------------------------------------------------- links

def _slug(heading):
    """GitHub's anchor of a markdown heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path):
    text = re.sub(r"^```.*?^```", "", _read(path), flags=re.S | re.M)  # no code blocks
    return {_slug(m) for m in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def _link_targets(path):
    text = re.sub(r"^```.*?^```", "", _read(path), flags=re.S | re.M)
    return re.findall(r"\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("doc", ["README.md"] + sorted(
    os.path.join("docs", f) for f in os.listdir(DOCS) if f.endswith(".md")))
def test_relative_links_resolve(doc):
    path = os.path.join(REPO_ROOT, doc)
    for target in _link_targets(path):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
            if file_part else path
        assert os.path.exists(dest), f"{doc}: link {target!r}: no file {dest}"
        if anchor:
            assert anchor in _anchors(dest), f"{doc}: link {target!r}: no such heading"


def test_readme_links_every_doc():
    linked = {os.path.normpath(t.partition("#")[0]) for t in _link_targets(README)}
    docs = {os.path.join("docs", f) for f in os.listdir(DOCS) if f.endswith(".md")}
    assert not docs - linked, f"docs not linked from README.md: {sorted(docs - linked)}"
