#!/usr/bin/env bash
# The README on a bare machine: a fresh clone, a venv from /usr/bin/python3 (nothing from this machine's
# site-packages), Debian's bwrap hidden, and the README's own code blocks run as written:
#   1. the first command (`pip install -e . && ept demo`, the block after the `docs-test: run` marker) exits 0
#      and prints the README's headline table, with every family measured;
#   2. the test command's install, then `pytest --collect-only` with no optional extra (no bfcl-eval):
#      every test module collects, 0 errors.
# Run by .ci/run before the test lanes; about 3 minutes (two pip installs and one demo).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d /tmp/ept-fresh.XXXXXX)"
trap 'rm -rf "$work"' EXIT
git clone -q "$repo" "$work/clone"
cd "$work/clone"
/usr/bin/python3 -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate

# The README's blocks, extracted, not copied: the first runnable one, and the test command's block.
python3 - "$repo/README.md" > "$work/blocks.sh" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
run = re.search(r"<!-- docs-test: run -->\n```bash\n(.*?)```", text, re.S).group(1).strip()
test = re.search(r"```bash\n(python3 -m pip install -e '\.\[dev\]' && python3 -m pytest)\n```", text).group(1)
print(f"FIRST={run!r}\nTEST={test!r}")
PY
# shellcheck disable=SC1090
. "$work/blocks.sh"
echo "fresh-machine: README's first command: $FIRST"

# Hide Debian's bwrap (if any) in a private mount namespace: the demo must sandbox code with what pip gave it.
hide=""
if [ -e /usr/bin/bwrap ]; then
    hide="mount --bind /dev/null /usr/bin/bwrap && "
fi
env -u EPT_BWRAP unshare --mount --propagation private bash -c "${hide}test ! -x /usr/bin/bwrap && ${FIRST}" \
    > "$work/demo.out" 2> "$work/demo.err" || {
    echo "fresh-machine: the README's first command failed"; tail -40 "$work/demo.err"; tail -40 "$work/demo.out"; exit 1; }

python3 - "$repo/README.md" "$work/demo.out" "$work/demo.err" <<'PY'
import re, sys
readme, out, err = (open(p, encoding="utf-8").read() for p in sys.argv[1:4])

def headline(text: str) -> list[str]:
    """The headline table's data rows, cells stripped: '│ arm │ budget │ …' lines after its title."""
    start = text.index("Diminishing returns (")
    rows = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("│"):
            rows.append(" | ".join(c.strip() for c in line.strip("│").split("│")))
        elif rows and line.startswith("└"):
            break
    return rows

block = readme[readme.index("## What `ept demo` prints"):]
want, got = headline(block), headline(out)
if not want or got != want:
    sys.exit("fresh-machine: the demo's table differs from the README's:\n  want " + "\n       ".join(want)
             + "\n  got  " + "\n       ".join(got))
if "missing" in out.split("Diminishing returns (", 1)[1].split("\n", 1)[0] or "failed 0" not in err:
    sys.exit("fresh-machine: the demo ran with failures or a missing family:\n" + err[-2000:])
print(f"fresh-machine: ept demo exit 0, headline table = README's ({len(got)} arms), no failed job")
PY

# The test command: its install as written, then collection only (the lanes run in CI's own environment).
install="${TEST%% && *}"
eval "$install" > "$work/install-dev.log" 2>&1 || { tail -30 "$work/install-dev.log"; exit 1; }
if python3 -c "import bfcl_eval" 2>/dev/null; then
    echo "fresh-machine: bfcl-eval is installed in the bare venv; the check needs it absent"; exit 1
fi
python3 -m pytest --collect-only -q -p no:cacheprovider > "$work/collect.log" 2>&1 || {
    echo "fresh-machine: pytest --collect-only failed"; tail -30 "$work/collect.log"; exit 1; }
grep -Eq "^[0-9]+ tests collected" "$work/collect.log" && ! grep -qi " error" "$work/collect.log" || {
    echo "fresh-machine: collection errors"; tail -30 "$work/collect.log"; exit 1; }
echo "fresh-machine: $(grep -E '^[0-9]+ tests collected' "$work/collect.log") with no optional extra, 0 errors"
