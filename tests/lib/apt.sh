# Sourced by the tests' setup scripts: `apt_install_missing "cmd1 cmd2" pkg1 pkg2` installs the
# Debian packages when any of the commands is missing (as root, or with sudo -n).
apt_install_missing() {
    local commands=$1 missing=""
    shift
    for c in $commands; do
        command -v "$c" >/dev/null 2>&1 || missing=yes
    done
    [ -z "$missing" ] && return 0
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo -n"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}
