# Sourced by demo.sh and test.sh: create or refresh ./.venv with requirements-dev.txt, then activate it.
# Re-installs only when a requirements file changed (a stamp holds their checksum).
# shellcheck shell=bash
venv_dir="${VENV:-${PWD}/.venv}"
python_bin="${PYTHON_FOR_VENV:-python3}"
command -v "${python_bin}" >/dev/null || { echo "venv.sh: ${python_bin} not found; install Python 3.10+" >&2; return 1; }
stamp="$(cat requirements.txt requirements-dev.txt | sha256sum | cut -d' ' -f1)"
if [[ ! -x "${venv_dir}/bin/python" ]]; then
  echo "venv.sh: creating ${venv_dir}"
  "${python_bin}" -m venv "${venv_dir}"
fi
if [[ "$(cat "${venv_dir}/.requirements.sha256" 2>/dev/null)" != "${stamp}" ]]; then
  echo "venv.sh: installing requirements-dev.txt into ${venv_dir} (once)"
  "${venv_dir}/bin/python" -m pip install --quiet --upgrade pip
  "${venv_dir}/bin/python" -m pip install --quiet -r requirements-dev.txt
  echo "${stamp}" > "${venv_dir}/.requirements.sha256"
fi
# shellcheck disable=SC1091
source "${venv_dir}/bin/activate"
