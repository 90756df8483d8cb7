# shellcheck shell=bash
# What run_with_docker.sh (one node) and run.sub (SLURM) share: reading the config, the NEXP loop (host
# tuning, page cache drop, one timed run tee'd to LOGDIR/<BENCHMARK>_<DGXSYSTEM>_<i>.log numbered on from the
# highest index already there, its compliance check), putting the host's settings back, and the final
# scoring; the lock that keeps a second launcher out of LOGDIR (lock_logdir). Sourced, never run.
#
# The launcher sets RUNNER (its name, for messages) and REPO_DIR (the repository root), calls
# reexec_with_sigint "$@", load_config and config_env, then defines where its steps run and calls preflight
# and run_experiments:
#   on_each_node COMMAND ...                      once on the host of every node (runtime tunables, cache drop)
#   run_inside [NAME=VALUE ...] -- COMMAND ...    once, where training runs (container or host), from the code
#                                                 folder: the preflight, the compliance checks, the scoring
#   run_training [NAME=VALUE ...] -- COMMAND ...  the timed run: every node, from the code folder
#   cleanup                                       on exit, whatever the reason (removes containers)
# and sets _py (the Python of run_inside) and _in_logdir (LOGDIR as run_inside sees it).
# shellcheck disable=SC2154  # _py and _in_logdir: set by the launcher
# Exit status of run_experiments: 0 when every run converged and passed its checks, 1 otherwise (each
# failure listed); die exits 2; SIGINT/SIGTERM exit 130/143, keeping the stopped run's partial log.

die() {
  echo "${RUNNER}: error: $*" >&2
  exit 2
}

# require_int MIN NAME...: each variable a plain whole number of at least MIN, before it is used in shell
# arithmetic (which would run a command hidden in a value such as HOME[$(command)]) or on a command line.
require_int() {
  local min=$1 name value
  shift
  for name; do
    value=${!name:-}
    if [[ ! ${value} =~ ^(0|[1-9][0-9]{0,17})$ ]] || ((value < min)); then
      die "${name}=${value}: expected a whole number$( ((min == 0)) || echo " of at least ${min}")"
    fi
  done
}

# require_mountable NAME...: each a folder that a container runtime can mount: its --volume, --bind and
# --container-mounts lists are separated by ':' and ','.
require_mountable() {
  local name
  for name; do
    [[ ${!name} != *[:,]* ]] || die "${name}=${!name}: a folder to mount in the container cannot have ':' or ','"
  done
}

# ---- the config: the one the user sourced; its names, as bash itself exports them ----

# A config saved on Windows: CRLF line endings leave a carriage return at the end of every value the user's
# shell set from it (a file name, a number, DGXSYSTEM that names the logs), and a UTF-8 byte-order mark glues
# itself to the first command. Refused before anything runs, in one line that says how to convert the file.
_crlf_fix() { # the command that converts FILE (or the file named so, when unknown)
  printf '%s\n' "sed -i 's/\r\$//' ${1} (or dos2unix ${1}), then source it again"
}
_refuse_crlf() { # _refuse_crlf NAME FILE: NAME's value holds a carriage return; FILE the config, if known
  local value=${!1} file=${2//$'\r'/} found
  if [[ -z ${file} && ${1} == DGXSYSTEM ]]; then # the file it names, where one of its name has CRs
    for found in "${PWD}/config_${value%%$'\r'*}.sh" "${REPO_DIR}"/configs/*/"config_${value%%$'\r'*}.sh"; do
      if [[ -f ${found} ]] && LC_ALL=C grep -q $'\r' -- "${found}"; then file=${found} && break; fi
    done
  fi
  die "${1}=${value//$'\r'/} ends in a carriage return: ${file:-the config you sourced} was saved with Windows" \
    "line endings (CRLF): convert it: $(_crlf_fix "${file:-CONFIG}")"
}
check_config_text() { # check_config_text FILE: no CRLF line endings, no byte-order mark
  local bom
  bom=$(head -c 3 -- "$1" | od -An -tx1 | tr -d ' \n')
  if [[ ${bom} == efbbbf ]]; then
    die "$1 starts with a UTF-8 byte-order mark, which bash reads as part of its first command: remove it:" \
      "sed -i '1s/^\xEF\xBB\xBF//' $1 (or dos2unix $1), then source it again"
  fi
  if LC_ALL=C grep -q $'\r' -- "$1"; then
    die "$1 has Windows line endings (CRLF), which leave a carriage return in every value: convert it:" \
      "$(_crlf_fix "$1")"
  fi
}

# _exported_by FILE [EMPTY]: in a subshell, source FILE with no variable exported (their values kept, as the
# user's shell had them; EMPTY=1: unset, all but a few a command needs) and print, one a line, the names
# exported afterwards: those FILE exported, whatever the way (export, declare -x, set -a, eval, a file it
# sources). They are printed on the subshell's exit, so a config that stops half-way (`${X:?}`) gives what it
# exported until then, as in the user's shell. The config's own output is dropped, and nothing it does
# outlives the subshell: the values that run are this shell's.
_exported_by() {
  local file=$1 empty=${2:-0}
  (
    set +euo pipefail # as an interactive shell sources it
    local name exported=()
    mapfile -t exported < <(compgen -e)
    if ((${#exported[@]} > 0)); then export -n "${exported[@]}"; fi
    if ((empty)); then
      for name in "${exported[@]}"; do
        case ${name} in
          PATH | HOME | USER | LOGNAME | SHELL | LANG | LC_* | TERM | TMPDIR) ;;
          *) if [[ $(declare -p -- "${name}") != "declare -"*r* ]]; then unset -v "${name}"; fi ;;
        esac
      done
    fi
    trap 'compgen -e >&3' EXIT
    # shellcheck source=/dev/null
    source "${file}" </dev/null >/dev/null 2>&1
  ) 3>&1
}

# config_names FILE: the names FILE exports, in the order bash lists them: sourced as the user's shell sourced
# it (_exported_by FILE), and from an empty environment (_exported_by FILE 1), which also sees a name exported
# only while unset (`[[ -z ${X:-} ]] && export X=1`: set here by the user's own sourcing). Sets _config_names
# and _config_conditional (those seen only from the empty environment: passed on when this shell has them).
config_names() {
  local file=$1 name as_sourced=() from_empty=()
  local -A seen=()
  [[ -f ${file} && -r ${file} ]] || die "${file}: no such config file (or not readable)"
  mapfile -t as_sourced < <(_exported_by "${file}")
  mapfile -t from_empty < <(_exported_by "${file}" 1)
  _config_names=() _config_conditional=()
  for name in "${as_sourced[@]}"; do
    _config_names+=("${name}") && seen[${name}]=1
  done
  for name in "${from_empty[@]}"; do
    [[ -z ${seen[${name}]:-} ]] || continue
    _config_names+=("${name}") && _config_conditional+=("${name}") && seen[${name}]=1
  done
}

# _source_config FILE: source FILE in this shell (CONFIG_FILE given alone: the launcher's own, and only,
# sourcing), as an interactive shell sources it (a failing line does not stop it, an unset variable is empty)
# and with no variable exported while it runs, so that what is exported afterwards is what it exported
# (_config_names); then everything exported before is exported again.
_source_config() {
  local before=()
  check_config_text "$1"
  mapfile -t before < <(compgen -e)
  if ((${#before[@]} > 0)); then export -n "${before[@]}"; fi
  set +euo pipefail
  # shellcheck source=/dev/null
  source "$1"
  set -euo pipefail
  mapfile -t _config_names < <(compgen -e)
  _config_conditional=()
  if ((${#before[@]} > 0)); then export "${before[@]}"; fi
}

# _find_config_file NAME: the config file CONFIG_FILE=NAME means, in _found: NAME itself where it is a file
# (from this folder), else, for a name without a folder, the one file of that name under
# REPO_DIR/configs/<benchmark>/ (AMD's BERT blog types `export CONFIG_FILE=config_MI300X_1x8x48.sh`, its
# configs lying beside its launcher); said when found so, refused when none or several are.
_find_config_file() {
  local name=$1 found=()
  _found=${name}
  [[ ! -f ${name} ]] || return 0
  [[ ${name} != */* ]] || die "CONFIG_FILE=${name}: no such file"
  mapfile -t found < <(compgen -G "${REPO_DIR}/configs/*/${name}")
  ((${#found[@]} > 0)) || die "CONFIG_FILE=${name}: no such file here (${PWD}) nor under" \
    "${REPO_DIR}/configs/<benchmark>/ (python -m training.benchmarks lists the benchmarks)"
  ((${#found[@]} == 1)) || die "CONFIG_FILE=${name}: not in this folder, and several benchmarks have a config" \
    "of that name: ${found[*]}; give its path"
  _found=${found[0]}
  echo "CONFIG_FILE=${name}: ${_found} (not in this folder; found under configs/<benchmark>/)"
}

# _missing_in_shell: the names of _config_names (all but _config_conditional) this shell has not exported.
_missing_in_shell() {
  local name
  local -A optional=()
  _missing=()
  for name in "${_config_conditional[@]}"; do optional[${name}]=1; done
  for name in "${_config_names[@]}"; do
    if [[ -z ${optional[${name}]:-} ]] && ! printenv "${name}" >/dev/null; then _missing+=("${name}"); fi
  done
}

# _sets_system FILE: FILE exports DGXSYSTEM as this shell has it.
_sets_system() {
  local line
  while IFS= read -r line; do
    [[ ${line} =~ ^[[:space:]]*export[[:space:]]+DGXSYSTEM=[\"\']?([A-Za-z0-9_.+-]+)[\"\']?[[:space:]]*$ ]] &&
      [[ ${BASH_REMATCH[1]} == "${DGXSYSTEM}" ]] && return 0
  done <"$1"
  return 1
}

# _find_sourced_config: for a shell whose DGXSYSTEM is set without CONFIG_FILE (a vendor's config, which does
# not name itself: AMD's and NVIDIA's launchers take ./config_${DGXSYSTEM}.sh beside themselves), the file it
# sourced: of config_${DGXSYSTEM}.sh in this folder, beside the launcher and under configs/<benchmark>/, the one
# whose every name this shell exports. Sets CONFIG_FILE, _config_names and _config_conditional; refuses, saying
# what to do, when none or several are.
_find_sourced_config() {
  local file real matched=() rejected=()
  local -A seen=()
  for file in "${PWD}/config_${DGXSYSTEM}.sh" "${REPO_DIR}/config_${DGXSYSTEM}.sh" \
    "${REPO_DIR}"/configs/"${BENCHMARK:-*}"/"config_${DGXSYSTEM}.sh"; do
    [[ -f ${file} ]] || continue
    real=$(readlink -f "${file}")
    [[ -z ${seen[${real}]:-} ]] || continue
    seen[${real}]=1
    check_config_text "${real}"
    config_names "${real}"
    _missing_in_shell
    if ((${#_missing[@]} == 0)); then
      matched+=("${real}")
    else
      rejected+=("${real} (exports ${_missing[*]:0:6}$( ((${#_missing[@]} <= 6)) || echo " ..."), which this shell has not)")
    fi
  done
  if ((${#matched[@]} == 1)); then
    CONFIG_FILE=${matched[0]}
    config_names "${CONFIG_FILE}"
    echo "DGXSYSTEM=${DGXSYSTEM} without CONFIG_FILE: the config sourced is ${CONFIG_FILE} (config_${DGXSYSTEM}.sh," \
      "every name it exports is in this shell)"
    return 0
  fi
  local hint="export CONFIG_FILE=<the file you sourced> (a config of this toolkit names itself: docs/custom_configs.md)"
  ((${#matched[@]} == 0)) || die "DGXSYSTEM=${DGXSYSTEM} is set but CONFIG_FILE is not, and several files" \
    "named config_${DGXSYSTEM}.sh match this shell: ${matched[*]}; ${hint}"
  if ((${#rejected[@]} == 0)); then
    die "DGXSYSTEM=${DGXSYSTEM} is set but CONFIG_FILE is not, and no config_${DGXSYSTEM}.sh is in this" \
      "folder (${PWD}), beside the launcher or under ${REPO_DIR}/configs/<benchmark>/: ${hint}"
  fi
  die "DGXSYSTEM=${DGXSYSTEM} is set but CONFIG_FILE is not: the config sourced in this shell does not name" \
    "itself, and the files of its name are not it: ${rejected[*]}; ${hint}"
}

# _vendor_values: BENCHMARK, DGXNNODES and DGXNGPU, where the config did not export them (AMD's and NVIDIA's
# configs name none or some of them): the benchmark from the configs/<benchmark>/ folder the config lies in,
# else from the names it exports and the scale from AMD's NNODES and GPUS_PER_NODE, by the vendor vocabulary
# (python3 -m training.common.vendor_vars launcher, standard library only, on this host).
_vendor_values() {
  local py=python3 out line name value
  local -A allowed=([BENCHMARK]=1 [DGXNNODES]=1 [DGXNGPU]=1)
  if [[ -z ${BENCHMARK:-} && ${_config_file} == "${REPO_DIR}"/configs/*/config_*.sh ]]; then
    BENCHMARK=${_config_file#"${REPO_DIR}"/configs/} && BENCHMARK=${BENCHMARK%%/*}
    echo "BENCHMARK=${BENCHMARK}: the config does not export it; it lies in configs/${BENCHMARK}/"
    export BENCHMARK
  fi
  [[ -z ${BENCHMARK:-} || -z ${DGXNNODES:-} || -z ${DGXNGPU:-} ]] || return 0
  if [[ ${CONTAINER_RUNTIME:-} == none ]]; then py=${PYTHON:-python3}; fi
  command -v "${py}" >/dev/null || die "${_config_file} does not export BENCHMARK, DGXNNODES or DGXNGPU, and" \
    "${py} is not on this host to tell them from its names: export them"
  out=$(cd "${REPO_DIR}" && CONFIG_VARS="${_config_names[*]}" "${py}" -m training.common.vendor_vars launcher) ||
    die "${_config_file}: the benchmark or the scale cannot be told (named above)"
  while IFS= read -r line; do
    [[ -n ${line} ]] || continue
    name=${line%%=*} value=${line#*=}
    [[ -n ${allowed[${name}]:-} && ${value} =~ ^[A-Za-z0-9_]+$ ]] ||
      die "training.common.vendor_vars printed an unexpected line: ${line}"
    printf -v "${name}" '%s' "${value}"
    export "${name?}"
  done <<<"${out}"
}

# The config sourced by the user (DGXSYSTEM set), or here from CONFIG_FILE; the launchers' defaults and
# checks. A config names itself: it exports CONFIG_FILE, its own path (every shipped config starts so), and
# DGXSYSTEM, its file name. The launchers find its variable names by sourcing that file (config_names), so a
# copy edited and sourced from anywhere is the config that runs. A vendor's config names neither: given as
# CONFIG_FILE (a path, or a bare name under configs/<benchmark>/), it is sourced here; sourced by the user
# (DGXSYSTEM set), it is found by its name (_find_sourced_config). CONFIG_FILE naming another file than
# config_${DGXSYSTEM}.sh is refused. Sets CONFIG_FILE, _config_file (its full path), _config_names and
# _config_conditional, _prefix (<BENCHMARK>_<DGXSYSTEM>) and _tune_host (0 for the CPU-sized configs:
# CPU_DEMO=1); BENCHMARK, DGXNNODES and DGXNGPU where the config did not export them (_vendor_values).
load_config() {
  local given system sourced_here=0 logdir_given name unnamed=()
  for name in CONFIG_FILE DGXSYSTEM BENCHMARK; do # what names the config file: before it is looked for
    if [[ ${!name:-} == *$'\r'* ]]; then _refuse_crlf "${name}" "${CONFIG_FILE:-}"; fi
  done
  if [[ -n ${CONFIG_FILE:-} ]]; then
    _find_config_file "${CONFIG_FILE}"
    CONFIG_FILE=${_found}
  fi
  if [[ -z ${DGXSYSTEM:-} ]]; then
    [[ -n ${CONFIG_FILE:-} ]] ||
      die "no config: 'source configs/<benchmark>/config_<SYSTEM>.sh' first, or set CONFIG_FILE (where sourcing" \
        "it failed on its first line, it may have been saved on Windows: dos2unix FILE)"
    given=$(readlink -f "${CONFIG_FILE}")
    _source_config "${given}"
    sourced_here=1
    system=$(basename "${given}" .sh)
    # the file sourced here is the config, whatever a config it sources says
    export CONFIG_FILE=${given} DGXSYSTEM="${DGXSYSTEM:-${system#config_}}"
  elif [[ -z ${CONFIG_FILE:-} ]]; then
    _find_sourced_config
    sourced_here=1
  fi
  [[ -f ${CONFIG_FILE} ]] || die "CONFIG_FILE=${CONFIG_FILE}: no such file"
  system=$(basename "${CONFIG_FILE}" .sh)
  # the file's name says its system, or the file sets it (MiTAC's config_MI325X_1node.sh: MI325X_1x8x1)
  [[ ${system} == "config_${DGXSYSTEM}" ]] || _sets_system "${CONFIG_FILE}" ||
    die "CONFIG_FILE=${CONFIG_FILE} is not the config of" \
    "DGXSYSTEM=${DGXSYSTEM} (config_${DGXSYSTEM}.sh) sourced in this shell: source the file you mean to run," \
    "or give CONFIG_FILE alone (unset DGXSYSTEM); a config that sources another sets both after it"
  if ((!sourced_here)); then config_names "$(readlink -f "${CONFIG_FILE}")"; fi
  [[ ${DGXSYSTEM} =~ ^[A-Za-z0-9][A-Za-z0-9_.+-]*$ ]] ||
    die "DGXSYSTEM=${DGXSYSTEM}: expected letters, digits and _ . + - (it names the logs)"
  _config_file=$(readlink -f "${CONFIG_FILE}")
  check_config_text "${_config_file}"
  for name in BENCHMARK DGXNNODES DGXNGPU; do # (one the config exports but this shell lacks: config_env says)
    if [[ -z ${!name:-} && " ${_config_names[*]} " != *" ${name} "* ]]; then unnamed+=("${name}"); fi
  done
  if ((${#unnamed[@]} > 0)); then _vendor_values; fi
  : "${BENCHMARK:?BENCHMARK not set: the config exports it (python -m training.benchmarks lists them)}"
  [[ ${BENCHMARK} =~ ^[a-z0-9][a-z0-9_]*$ ]] ||
    die "BENCHMARK=${BENCHMARK}: expected a benchmark's name (python -m training.benchmarks lists them)"
  : "${DATADIR:?DATADIR not set: export DATADIR=<the prepared data folder>}"
  : "${LOGDIR:=./results}"
  : "${NEXP:=1}"
  : "${CLEAR_CACHES:=1}"
  : "${CHECK_COMPLIANCE:=1}" # 0: no compliance check after each run (the scorer still reads the logs)
  : "${LOGDIR_MB_PER_RUN:=64}"
  : "${CONT_NAME:=mlperf_${BENCHMARK}}"
  : "${PYTHON:=python3}"                        # CONTAINER_RUNTIME=none only; the image's python3 otherwise
  : "${DROPCACHE_CMD:=sysctl vm.drop_caches=3}" # run through sudo -n when not root
  if [[ -z ${MODEL:-} && -n ${MODELDIR:-} ]]; then # AMD's v6.0 8B README exports MODELDIR
    MODEL=${MODELDIR} && echo "MODEL=${MODEL}: from MODELDIR, the README's name for it"
  fi
  if [[ -f ${DATADIR} ]]; then
    die_data DATADIR "DATADIR=${DATADIR} is a file, not a folder: DATADIR is the folder the data was prepared in"
  elif [[ ! -d ${DATADIR} ]]; then
    die_data DATADIR "DATADIR=${DATADIR}: no such directory (the prepared data folder)"
  elif [[ -n ${MODEL:-} && ! -d ${MODEL} ]]; then
    die_data MODEL "MODEL=${MODEL}: no such directory (the model folder, mounted at /model)"
  fi
  [[ ${NEXP} =~ ^[1-9][0-9]{0,5}$ ]] || die "NEXP=${NEXP}: expected a positive whole number"
  [[ -z ${SEED:-} || ${SEED} =~ ^[0-9]{1,18}$ ]] || die "SEED=${SEED}: not a non-negative integer"
  case ${CLEAR_CACHES} in # AMD's and NVIDIA's configs say 1 or 0; their READMEs also true or false
    1 | [Tt][Rr][Uu][Ee] | [Yy][Ee][Ss] | [Oo][Nn]) CLEAR_CACHES=1 ;;
    0 | [Ff][Aa][Ll][Ss][Ee] | [Nn][Oo] | [Oo][Ff][Ff]) CLEAR_CACHES=0 ;;
    *) die "CLEAR_CACHES=${CLEAR_CACHES}: expected 1 or 0 (true or false)" ;;
  esac
  [[ ${CLEAR_CACHES} =~ ^[01]$ ]] # (what reaches arithmetic: a digit, in the form tests/launch lints for)
  [[ ${CHECK_COMPLIANCE} =~ ^[01]$ ]] || die "CHECK_COMPLIANCE=${CHECK_COMPLIANCE}: expected 0 or 1"
  [[ ${CONSOLE:-compact} =~ ^(compact|full)$ ]] || die "CONSOLE=${CONSOLE}: expected compact or full"
  require_int 0 LOGDIR_MB_PER_RUN
  [[ ${CONT_NAME} =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] ||
    die "CONT_NAME=${CONT_NAME}: expected letters, digits and _ . - (a container's name)"
  case ${CPU_DEMO:-0} in # as the trainers read it
    1 | [Tt][Rr][Uu][Ee] | [Yy][Ee][Ss] | [Oo][Nn]) _tune_host=0 ;;
    0 | [Ff][Aa][Ll][Ss][Ee] | [Nn][Oo] | [Oo][Ff][Ff] | '') _tune_host=1 ;;
    *) die "CPU_DEMO=${CPU_DEMO}: expected 0/1, true/false, yes/no" ;;
  esac
  # A relative LOGDIR is the launcher's folder's, as AMD's run_with_docker.sh (which first changes to its own
  # folder) takes it; where the logs go is said.
  logdir_given=${LOGDIR}
  [[ ${LOGDIR} == /* ]] || LOGDIR="${REPO_DIR}/${LOGDIR}"
  mkdir -p "${LOGDIR}"
  LOGDIR=$(cd "${LOGDIR}" && pwd)
  if [[ ${logdir_given} == /* ]]; then
    echo "Logs: ${LOGDIR}"
  else
    echo "Logs: ${LOGDIR} (LOGDIR=${logdir_given}, from the launcher's folder as AMD's run_with_docker.sh takes it)"
  fi
  lock_logdir
  DATADIR=$(cd "${DATADIR}" && pwd)
  if [[ -n ${MODEL:-} ]]; then MODEL=$(cd "${MODEL}" && pwd); fi
  check_logdir_space
  _prefix="${BENCHMARK}_${DGXSYSTEM}"
}

# die_data NAME MESSAGE: a data folder's error (NAME: DATADIR or MODEL), then the command that prepares it for
# this benchmark (python -m training.prepare_hint, standard library only, on this host; in the image for
# run_with_docker.sh's docker or podman).
die_data() {
  local py=python3 args=("${BENCHMARK}" "${!1}") hint
  if [[ ${CONTAINER_RUNTIME:-} == none ]]; then py=${PYTHON:-python3}; fi
  if [[ -f ${!1} ]]; then args[1]=DIR; fi
  if [[ $1 == MODEL ]]; then args+=(--model); fi
  case ${CPU_DEMO:-0} in 1 | [Tt][Rr][Uu][Ee] | [Yy][Ee][Ss] | [Oo][Nn]) args+=(--sample) ;; esac
  if [[ ${RUNNER} == run_with_docker.sh && ${CONTAINER_RUNTIME:-docker} =~ ^(docker|podman)$ && -n ${CONT:-} ]]
  then
    args+=(--image "${CONTAINER_RUNTIME:-docker}" "${CONT}")
  fi
  hint=$(cd "${REPO_DIR}" && "${py}" -m training.prepare_hint "${args[@]}" 2>/dev/null) ||
    hint="./input_preprocessing/prepare_data.sh --help says how (README.md: Running the real benchmark)"
  if [[ ${hint} == ./* ]]; then hint="cd ${REPO_DIR} && ${hint}"; fi
  echo "${RUNNER}: error: $2" >&2
  echo "  to prepare it for ${BENCHMARK}: ${hint}" >&2
  exit 2
}

# ---- one launcher per LOGDIR ----

# lock_logdir: hold LOGDIR/.launcher.lock (flock) for the launcher's life, so that a second launcher on the
# same LOGDIR (another terminal, a job submitted twice) refuses before it writes anything, instead of taking
# the same log numbers and scoring runs still going. The kernel drops the lock with the last process holding
# the file open, whatever the way it ends (a crash, SIGKILL), so it is never left stale; the processes the
# launcher started inherit it, and hold LOGDIR until they end too. Who holds it (host, process, start time) is
# written beside it, LOGDIR/.launcher.holder, for the refusal to name. A file system without locks is said
# and not protected (the logs' numbers are still reserved one by one: reserve_log).
_lock_fd=''
lock_logdir() {
  local lock="${LOGDIR}/.launcher.lock" holder="${LOGDIR}/.launcher.holder" rc=0 job=''
  command -v flock >/dev/null || die "flock (util-linux) not found: it keeps a second launcher out of LOGDIR"
  exec {_lock_fd}<>"${lock}" || die "LOGDIR=${LOGDIR}: cannot open ${lock} (is LOGDIR writable?)"
  flock --nonblock --conflict-exit-code 75 "${_lock_fd}" || rc=$?
  if ((rc == 75)); then
    die "LOGDIR=${LOGDIR} is in use by $(_lock_holder "${holder}"): wait for it to end, or give another LOGDIR"
  elif ((rc != 0)); then
    echo "WARNING: LOGDIR=${LOGDIR}: its file system does not lock files (flock exit ${rc}): nothing keeps a" \
      "second launcher out of it" >&2
    return 0
  fi
  if [[ -n ${SLURM_JOB_ID:-} ]]; then job=" (SLURM job ${SLURM_JOB_ID})"; fi
  printf '%s\t%s\t%s\t%s\n' "${HOSTNAME}" "$$" "$(date +%s)" "${RUNNER}${job}" >"${holder}.$$.tmp"
  mv -f -- "${holder}.$$.tmp" "${holder}"
}

# _lock_holder FILE: the launcher that holds LOGDIR's lock, in words, from FILE (host, pid, start, name). Its
# holder may not have written FILE yet (it does right after taking the lock), or FILE may still name the one
# before: read again for up to 2 s while FILE is missing or names a process of this host that has ended.
_lock_holder() {
  local file=$1 host='' pid='' start='' who='' tries=0 words
  while ((tries++ < 20)); do
    if [[ -f ${file} ]] && IFS=$'\t' read -r host pid start who <"${file}" && [[ ${pid} =~ ^[0-9]+$ ]] &&
      [[ ${host} != "${HOSTNAME}" || -d /proc/${pid} ]]; then
      break
    fi
    sleep 0.1
  done
  [[ -n ${who} && ${start} =~ ^[0-9]+$ ]] || {
    echo "another launcher (it has not said which: ${file} is missing or unreadable)"
    return 0
  }
  words="${who}, process ${pid} on ${host}, started $(date -u -d "@${start}" '+%Y-%m-%d %H:%M:%S UTC')"
  if [[ ${host} == "${HOSTNAME}" && ! -d /proc/${pid} ]]; then
    words+=" (that process has ended; what it started still runs and holds the lock)"
  fi
  echo "${words}"
}

# reserve_log: the next run's log, LOGDIR/<prefix>_<i>.log for the lowest i above every log there, created
# here and now with O_CREAT|O_EXCL (bash's noclobber), so that two writers, even past the lock, never share a
# file: the one that loses takes the next number. Sets _tag (<prefix>_<i>) and _log.
reserve_log() {
  local index
  index=$(next_index)
  until (set -o noclobber && : >"${LOGDIR}/${_prefix}_${index}.log") 2>/dev/null; do
    [[ -e ${LOGDIR}/${_prefix}_${index}.log ]] ||
      die "cannot create ${LOGDIR}/${_prefix}_${index}.log (is LOGDIR writable?)"
    index=$((index + 1))
  done
  _tag="${_prefix}_${index}" _log="${LOGDIR}/${_prefix}_${index}.log"
}

# The free space of LOGDIR in KiB, as df reports it to a user (the blocks kept for root left out).
logdir_free_kib() {
  local out fields
  out=$(df -Pk -- "${LOGDIR}") || return 1
  read -ra fields <<<"${out##*$'\n'}"
  [[ ${fields[3]:-} =~ ^[0-9]+$ ]] || return 1
  echo "${fields[3]}"
}

# Refuse before the first run when LOGDIR cannot hold what the runs write. A run leaves its log there (the
# MLLOG lines, a loss line every LOG_FREQ steps: about 600 for a Llama 3.1 8B run to its sample limit, 80 for
# BERT, and every rank's warnings; under 1 MB, a few MB with NCCL_DEBUG=INFO on many ranks), its effective
# config, compliance report and tunables reports (a few KB each). LOGDIR_MB_PER_RUN (default 64) is well
# above that; the summary and its plot are given one more such share. LOGDIR_MB_PER_RUN=0 skips the check.
check_logdir_space() {
  ((LOGDIR_MB_PER_RUN > 0)) || return 0
  local free need=$(((NEXP + 1) * LOGDIR_MB_PER_RUN))
  free=$(logdir_free_kib) ||
    die "could not read the free space of LOGDIR=${LOGDIR} from df (LOGDIR_MB_PER_RUN=0 skips the check)"
  ((free >= need * 1024)) || die "LOGDIR=${LOGDIR}: $((free / 1024)) MiB free, but NEXP=${NEXP} runs need" \
    "${need} MiB (LOGDIR_MB_PER_RUN=${LOGDIR_MB_PER_RUN} each, and as much for the summary): free some" \
    "space, point LOGDIR elsewhere, or set LOGDIR_MB_PER_RUN to what a run of yours writes"
}

# The names the config exports go to the container by name (the value comes from this shell); CONFIG_VARS
# lists them for the trainers, which report an unknown one as a likely typo.
config_env() {
  local name
  ((${#_config_names[@]} > 0)) || die "${_config_file} exports no variables"
  for name in "${_config_names[@]}"; do # (a file the config sources, saved on Windows)
    if [[ ${!name:-} == *$'\r'* ]]; then _refuse_crlf "${name}" "${_config_file}"; fi
  done
  echo "Config ${_config_file}: ${_config_names[*]}"
  export CONFIG_VARS="${_config_names[*]}"
  _missing_in_shell
  ((${#_missing[@]} == 0)) || die "not exported in this shell: ${_missing[*]} (${_config_file} exports them:" \
    "source it in this shell, or give CONFIG_FILE alone)"
  # Set by the launcher itself, per container or per run, or a host path: never copied from this shell.
  local -A seen=([DATADIR]=1 [LOGDIR]=1 [MODEL]=1 [CONFIG_VARS]=1 [CONFIG_FILE]=1 [RUN_TAG]=1 [SEED]=1
    [CLEAR_CACHES]=1)
  _pass_env=()
  for name in "${_config_names[@]}" BENCHMARK DGXSYSTEM DGXNNODES DGXNGPU; do
    [[ -z ${seen[${name}]:-} ]] || continue
    seen[${name}]=1
    if printenv "${name}" >/dev/null; then _pass_env+=("${name}"); fi
  done
}

preflight() {
  echo "Preflight: ${_py} -m training.preflight"
  local rc=0
  run_inside -- "${_py}" -m training.preflight || rc=$?
  ((rc == 0)) || die "preflight failed (exit ${rc}): fix what it names above; no run was started"
}

next_index() { # 1 + the highest <prefix>_<n>.log already in LOGDIR
  local f n max=0
  for f in "${LOGDIR}/${_prefix}"_*.log; do
    n=${f#"${LOGDIR}/${_prefix}_"} && n=${n%.log}
    if [[ ${n} =~ ^[0-9]+$ ]] && ((10#${n} > max)); then max=$((10#${n})); fi
  done
  echo $((max + 1))
}

drop_caches() { # on every node; sysctl's echo of the setting ("vm.drop_caches = 3") left out
  local cmd
  read -ra cmd <<<"${DROPCACHE_CMD}"
  ((EUID == 0)) || cmd=(sudo -n "${cmd[@]}")
  # shellcheck disable=SC2016  # "$@" is the inner shell's
  on_each_node bash -c 'sync && "$@" >/dev/null' drop_caches "${cmd[@]}"
}

run_trial() { # run_trial K TAG SEED: host tuning, cache drop, one timed run; prints everything for the log
  local cleared=0
  echo "Beginning trial $1 of ${NEXP}: RUN_TAG=$2 SEED=$3"
  if ((_tune_host)); then
    on_each_node bash "${REPO_DIR}/runtime_tunables.sh" "${LOGDIR}" ||
      echo "WARNING: runtime_tunables.sh failed (exit $?)" >&2
  else
    echo "CPU_DEMO=1: runtime tunables not applied (they tune a benchmark node): no kernel setting is changed"
  fi
  if ((CLEAR_CACHES == 0)); then
    echo "CLEAR_CACHES=0: page cache not dropped"
  elif drop_caches; then
    # what MLPerf's rules ask before each run: cached file data is freed (the data is read from disk
    # again), no setting changes
    cleared=1 && echo "Clear page cache: sync, then ${DROPCACHE_CMD} (frees cached file data; CLEAR_CACHES=0" \
      "skips it)"
  else
    echo "WARNING: could not drop the page cache (${DROPCACHE_CMD} needs root or passwordless sudo):" \
      "CLEAR_CACHES=0 for this run" >&2
  fi
  local run_env=("RUN_TAG=$2" "SEED=$3" "CLEAR_CACHES=${cleared}" "CONFIG_FILENAME=${_config_file##*/}")
  # a round chosen in this shell rather than in the config file (MLLOG and the checks follow it)
  if [[ -n ${MLPERF_RULESET:-} ]]; then run_env+=("MLPERF_RULESET=${MLPERF_RULESET}"); fi
  run_training "${run_env[@]}" -- bash training/run_and_time.sh
}

# Put back, on every node, each setting runtime_tunables.sh changed (it keeps their first values): at the end
# of the runs, and on the way out when stopped or failing.
_restore_pending=0
restore_tunables() {
  _restore_pending=0
  if on_each_node bash "${REPO_DIR}/runtime_tunables.sh" --restore "${LOGDIR}"; then
    echo "${RUNNER}: runtime tunables restored"
  else
    echo "WARNING: runtime_tunables.sh --restore failed (exit $?): the host settings it names above are" \
      "still the benchmark's" >&2
  fi
}

# describe_run TAG RC: why trial TAG failed: the trainer's own outcome (training.common.outcome reads the
# LOGDIR/<TAG>.outcome*.json its ranks wrote), since torchrun exits 1 for any failed worker; without one, the
# exit status (2: run_and_time.sh refused its settings).
describe_run() {
  local verdict
  if verdict=$(run_inside -- "${_py}" -m training.common.outcome "${_in_logdir}/$1.log"); then
    echo "${verdict}"
  elif (($2 == 2)); then
    echo "exit 2, config error (named above in the log)"
  else
    echo "exit $2, the trainer wrote no outcome (killed, or it failed before starting): see its log"
  fi
}

# What the console shows of a run: CONSOLE=compact (the default) through training.common.console (progress
# and evaluation lines for the :::MLLOG ones, torchrun's failure report left to the log), with this host's
# Python ($PYTHON without a container, else python3 where there is one); CONSOLE=full shows every line.
console_filter() {
  local py=python3
  if [[ ${CONTAINER_RUNTIME} == none ]]; then py=${PYTHON}; fi
  if [[ ${CONSOLE:-compact} == compact ]] && command -v "${py}" >/dev/null; then
    "${py}" -m training.common.console
  else
    cat
  fi
}

# Why a trial's log could not be written: a full LOGDIR (with what df says is free), or tee's own error.
describe_log_failure() {
  local free
  if free=$(logdir_free_kib) && ((free < 1024)); then
    echo "disk full in LOGDIR (${LOGDIR}: ${free} KiB free): its log is incomplete"
  else
    echo "the log could not be written (tee exit $1, its error above)"
  fi
}

# A non-interactive shell starts its background jobs (`bash run_with_docker.sh &` in a script, a CI step, a
# test runner started that way) with SIGINT ignored, and bash can neither trap nor reset a signal ignored when
# it started: install_traps' INT trap would be dropped without a word, and a SIGINT (kill -INT, a CI's cancel,
# a Ctrl-C reaching the wrapper's process group) would leave the run going and the host tuned until it ended.
# A launcher started so runs itself again, once, with SIGINT at its default. Its first call, with its
# arguments: nothing before it is done twice.
reexec_with_sigint() {
  local again=${_RUNNER_SIGINT_RESET:-}
  unset _RUNNER_SIGINT_RESET
  [[ -n $(trap -p INT) ]] || return 0 # no trap is set yet: a listed one is SIGINT ignored at the start
  if [[ -z ${again} ]] && env --default-signal=INT true 2>/dev/null; then
    exec env --default-signal=INT _RUNNER_SIGINT_RESET=1 "${BASH}" "$0" "$@"
  fi
  echo "WARNING: ${RUNNER} was started with SIGINT ignored and cannot undo it (env --default-signal needs" \
    "coreutils 8.31): SIGINT will not stop it, SIGTERM will" >&2
}

# stop_run SIG: pass the signal that stopped the launcher (INT or TERM) on to the run's process group, so that
# the trainer's outcome names the signal that arrived (SIGINT for a Ctrl-C). run.sub redefines it for srun.
stop_run() { kill -s "$1" -- "-${_run_pid}"; }

_run_pid='' _tee_pid='' _fifo_dir=''
_on_exit() {
  local rc=$?
  if ((_restore_pending)); then restore_tunables; fi
  cleanup
  if [[ -n ${_fifo_dir} ]]; then rm -rf -- "${_fifo_dir}"; fi
  exit "${rc}"
}
_on_signal() { # stop the run in progress; its log keeps what it wrote; _on_exit cleans up
  # Once stopping, a second Ctrl-C (the user who presses it again) must not cut the stop short: it would run
  # this again and kill, as part of the terminal's process group, the restore of the host's settings that
  # _on_exit runs. Ignored here, and so in each command started from here on.
  trap '' INT TERM
  echo "${RUNNER}: caught SIG$1, stopping" >&2
  if [[ -n ${_run_pid} ]]; then
    stop_run "$1" 2>/dev/null || echo "(the run had already ended)" >&2
    wait "${_run_pid}" || echo "run stopped (exit $?); partial log: ${_log}" >&2
    # what outlived the run in its group: a background child of a script, started with SIGINT ignored
    kill -TERM -- "-${_run_pid}" 2>/dev/null || : # (none: the usual case)
  elif [[ -n ${_tee_pid} ]]; then
    : >"${_fifo_dir}/output" # no run to write: tee, waiting for one, gets an empty output
  fi
  if [[ -n ${_tee_pid} ]]; then
    wait "${_tee_pid}" || echo "(writing the log failed: exit $?)" >&2
    echo "${RUNNER}: run stopped by SIG$1" >>"${_log}"
  fi
  exit "$2"
}
install_traps() {
  trap _on_exit EXIT
  trap '_on_signal INT 130' INT
  trap '_on_signal TERM 143' TERM
}

# The NEXP runs, each with its compliance check, then the host's settings put back and the score of LOGDIR;
# exits with the verdict.
run_experiments() {
  local k tag seed rc tee_rc score_rc=0 failures=() log_fd
  _fifo_dir=$(mktemp -d "${TMPDIR:-/tmp}/mlperf_run.XXXXXX") || die "could not create a temporary folder"
  mkfifo "${_fifo_dir}/output"
  _restore_pending=${_tune_host}
  for ((k = 1; k <= NEXP; k++)); do
    reserve_log
    tag=${_tag}
    # Held while the run writes its log (and by what it starts): the scorer counts only logs nobody holds.
    exec {log_fd}<>"${_log}"
    flock --nonblock "${log_fd}" ||
      echo "WARNING: could not lock ${_log} (flock exit $?): a scorer may take it for ended" >&2
    if [[ -n ${SEED:-} ]]; then # a fixed first seed (to repeat runs): SEED, SEED+1, ... for the trials
      seed=$((SEED + k - 1))
    else
      seed=$(($(od -An -N4 -tu4 /dev/urandom) & 0x7fffffff))
    fi
    # The trial runs as its own process group, so a signal handler can stop all of it; it ignores the stop
    # signal itself, to wait for its run and exit with its status. Its output goes through a FIFO to tee, a
    # process of its own that ignores the signal too: it writes the run's last words to the log until the run
    # has ended, and its exit status tells a log that could not be written (a full disk) from a failed run.
    # The console gets tee's copy through console_filter; tee writes the log whatever becomes of the filter.
    set -m
    (
      trap '' INT TERM
      set +e
      tee -p "${_log}" | console_filter
      exit "${PIPESTATUS[0]}"
    ) <"${_fifo_dir}/output" &
    _tee_pid=$!
    (
      trap '' INT TERM
      set +e
      (trap - INT TERM && run_trial "${k}" "${tag}" "${seed}")
    ) >"${_fifo_dir}/output" 2>&1 &
    _run_pid=$!
    set +m
    if wait "${_run_pid}"; then rc=0; else rc=$?; fi
    if wait "${_tee_pid}"; then tee_rc=0; else tee_rc=$?; fi
    _run_pid='' _tee_pid=''
    exec {log_fd}<&-
    if ((tee_rc != 0)); then # the next runs' logs could not be written either
      failures+=("trial ${k} (${_log}): $(describe_log_failure "${tee_rc}") (the run's own exit: ${rc})")
      if ((k + 1 == NEXP)); then
        failures+=("trial ${NEXP} not started: its log could not be written either")
      elif ((k < NEXP)); then
        failures+=("trials $((k + 1))-${NEXP} not started: their logs could not be written either")
      fi
      break
    fi
    ((rc == 0)) || failures+=("trial ${k} (${_log}): $(describe_run "${tag}" "${rc}")")
    if ((CHECK_COMPLIANCE == 0)); then
      echo "CHECK_COMPLIANCE=0: compliance check not run for ${_log}"
    else
      run_inside -- "${_py}" -m training.scoring.compliance "${_in_logdir}/${tag}.log" ||
        failures+=("trial ${k} (${_log}): compliance check failed (exit $?), see ${LOGDIR}/${tag}.compliance.txt")
    fi
  done
  if ((_restore_pending)); then restore_tunables; fi

  echo "Scoring: ${_py} -m training.scoring ${_in_logdir}"
  run_inside -- "${_py}" -m training.scoring "${_in_logdir}" || score_rc=$?
  # the scorer's exit 1: the summary was written and a run does not count; anything else: no summary
  if ((score_rc == 1)); then
    failures+=("scoring of ${LOGDIR}: not every run counts (exit 1), see ${LOGDIR}/summary.md")
  elif ((score_rc != 0)); then
    failures+=("scoring of ${LOGDIR} failed (exit ${score_rc}): no summary written, its error is above")
  fi
  if ((${#failures[@]} > 0)); then
    echo "${RUNNER}: ${#failures[@]} problem(s):" >&2
    printf '  - %s\n' "${failures[@]}" >&2
    where_the_results_are
    exit 1
  fi
  echo "${RUNNER}: ${NEXP} run(s) converged and passed compliance"
  where_the_results_are
}

# The last words of the launcher: where the summary, the plot and the logs are.
where_the_results_are() {
  if [[ -f ${LOGDIR}/summary.md ]]; then echo "${RUNNER}: summary: ${LOGDIR}/summary.md"; fi
  if [[ -f ${LOGDIR}/eval_accuracy.png ]]; then echo "${RUNNER}: plot: ${LOGDIR}/eval_accuracy.png"; fi
  echo "${RUNNER}: each run's full output, its MLLOG lines included: ${LOGDIR}/${_prefix}_<i>.log"
}
