# Sourced by run.sh, test.sh and gpu-check.sh: installs the Debian packages halfgrad needs, only
# those that are missing (a fresh machine has none of them).
HG_PACKAGES=(cmake g++ make libeigen3-dev doctest-dev zlib1g-dev libcli11-dev python3 dataset-fashion-mnist libopenmpi-dev openmpi-bin)

hg_install_missing() {
  local missing=()
  for p in "${HG_PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "halfgrad: installing missing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
