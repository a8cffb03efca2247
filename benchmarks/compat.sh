#!/usr/bin/env bash
# The families tests against another transformers release, in a venv of its own beside the project's:
#   benchmarks/compat.sh 5.23.0   (the previous release; constraints.txt pins the current one)
# Everything else stays at constraints.txt's pins. Prints the pytest summary; exits as pytest does.
set -euo pipefail
version="${1:?usage: benchmarks/compat.sh TRANSFORMERS_VERSION}"
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${COMPAT_VENV:-$root/.venv-transformers-$version}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  grep -v '^transformers==' "$root/constraints.txt" > "$venv/constraints.txt"
  echo "transformers==$version" >> "$venv/constraints.txt"
  "$venv/bin/pip" install -q -c "$venv/constraints.txt" -e "$root[dev]"
fi
"$venv/bin/python" -c "import transformers; print('transformers', transformers.__version__)"
cd "$root"
PYTHONPATH="$root/src" "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  tests/modules/test_families.py tests/modules/test_hf_modules.py tests/model/test_config_variants.py \
  tests/modules/test_family_adapters.py
