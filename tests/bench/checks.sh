# The shell tests' checks, sourced: `check WHAT COMMAND...` runs COMMAND,
# prints "ok: WHAT" or "FAIL: WHAT" and counts; `checks_done` prints the
# closing "N passed, N failed" line and returns non-zero on a failure.
passes=0
fails=0

check() {
    local what=$1
    shift
    if "$@"; then
        echo "ok: $what"
        passes=$((passes + 1))
    else
        echo "FAIL: $what"
        fails=$((fails + 1))
    fi
}

checks_done() {
    echo "$passes passed, $fails failed"
    [ "$fails" = 0 ]
}
