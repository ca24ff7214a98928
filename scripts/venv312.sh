# Sourced by scripts/harbor_setup.sh and scripts/inspect_setup.sh: a Python >= 3.12 virtual
# environment (Harbor and inspect-harbor need 3.12; levelfield alone runs on 3.11), and `have`,
# which tells whether a package is installed in it at a version.
#   make_venv312 VENV WHO WHAT    WHO names the caller in messages, WHAT what needs 3.12

find_python312() {  # pyenv's shim may exist without 3.12 being selected: try each for real
  local root candidate
  root="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
  for candidate in $(ls -d "$root"/versions/3.1[2-9].*/bin/python 2>/dev/null | sort -V) \
                   python3.12 python3.13; do
    if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      command -v "$candidate"
      return
    fi
  done
}

make_venv312() {
  local venv="$1" who="$2" what="$3" python
  [ -x "$venv/bin/python" ] && return
  python=$(find_python312)
  if [ -z "$python" ]; then
    echo "$who: $what needs Python >= 3.12 and none was found (python3.12 on PATH," \
         "or pyenv's \$(pyenv root)/versions/3.12.*): install one, e.g. pyenv install 3.12" >&2
    exit 1
  fi
  echo "$who: $venv from $python"
  "$python" -m venv "$venv"
}

have() { "$VENV/bin/python" -c "import importlib.metadata as m; import sys; sys.exit(m.version('$1') != '$2')" 2>/dev/null; }
