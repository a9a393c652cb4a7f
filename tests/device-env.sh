# Sourced by tests/device-check.sh and tests/device-study.sh on a device machine: with
# MPX_DEVICE_PREBUILT=1 (binaries built elsewhere and unpacked from tests/device-pack.sh's
# pack) it puts .devcarry/lib on LD_LIBRARY_PATH and adds OpenMPI's runtime from the pack's
# Debian packages where the machine has none (files added, none replaced). Expects say().
if [ "${MPX_DEVICE_PREBUILT:-0}" = 1 ]; then
    export LD_LIBRARY_PATH="$PWD/.devcarry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if [ ! -d /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3 ] && ls .devcarry/debs/*.deb >/dev/null 2>&1; then
        x=$(mktemp -d) && chmod 755 "$x"
        for deb in .devcarry/debs/*.deb; do dpkg -x "$deb" "$x"; done
        # tar keeps the machine's /lib -> usr/lib links, its directories' modes and every file
        # already there
        (cd "$x" && tar -cf - .) | (cd / && tar -xf - --skip-old-files --keep-directory-symlink) &&
            say "OpenMPI runtime added from .devcarry/debs"
        rm -rf "$x"
    fi
    say "prebuilt: $(cat build/git-commit.txt 2>/dev/null || echo '?'); no build"
fi
