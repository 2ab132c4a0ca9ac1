# pypi_wheel.sh (sourced): pypi_wheel PY MODULE SPEC CACHE makes a pure-Python package importable
# by PY: an installed one as it is, else the wheel of SPEC ("timm==1.0.9") from PyPI, downloaded
# once without its dependencies and unpacked into CACHE, which goes on PYTHONPATH. Returns 0 when
# MODULE imports, else 1 with the reason in $pypi_why.
pypi_wheel() {
  local py=$1 module=$2 spec=$3 cache=$4 dl whl pip
  pypi_why=
  "$py" -c "import $module" 2>/dev/null && return 0
  if [ ! -f "$cache/$module/__init__.py" ]; then
    dl=$(mktemp -d)
    for pip in "python3 -m pip" "$py -m pip"; do
      timeout 120 $pip download --no-deps --quiet "$spec" -d "$dl" >/dev/null 2>&1 && break
    done
    whl=$(ls "$dl"/*.whl 2>/dev/null | head -n 1)
    if [ -z "$whl" ]; then
      rm -rf "$dl"
      pypi_why="$module is not installed and PyPI gave no $spec wheel"
      return 1
    fi
    if ! { mkdir -p "$cache" && "$py" -m zipfile -e "$whl" "$cache"; }; then
      rm -rf "$dl"
      pypi_why="cannot unpack $whl into $cache"
      return 1
    fi
    rm -rf "$dl"
  fi
  export PYTHONPATH="$cache${PYTHONPATH:+:$PYTHONPATH}"
  "$py" -c "import $module" 2>/dev/null && return 0
  pypi_why="$module from $cache does not import: $("$py" -c "import $module" 2>&1 | tail -n 1)"
  return 1
}
