#!/usr/bin/env bash
# The installed libflps as a training job sees it: `cmake --install` into a
# scratch prefix, only flps_ symbols exported, none of the daemons'
# libraries pulled in, examples/c/train_loop.c built with pkg-config and as
# a find_package(flps) project (shared and static), and each binary trained
# against two real flps shards on loopback until its weights check out.
#
# usage: test_install.sh BUILD_DIR SOURCE_DIR [SANITIZE]
#   SANITIZE is ON when BUILD_DIR was configured with -DFLPS_SANITIZE=ON:
#   the example is then built with -fsanitize=address,undefined too (an
#   instrumented library needs an instrumented program to load it).
set -u

build=${1:?usage: test_install.sh BUILD_DIR SOURCE_DIR [SANITIZE]}
src=${2:?usage: test_install.sh BUILD_DIR SOURCE_DIR [SANITIZE]}
sanitize=${3:-OFF}
build=$(cd "$build" && pwd) || exit 1
src=$(cd "$src" && pwd) || exit 1

tmp=$(mktemp -d "${TMPDIR:-/tmp}/flps-install.XXXXXX") || exit 1
prefix=$tmp/prefix
shard_pids=()
passed=0
failed=0

# Every exit path stops the shards this script started and removes $tmp.
cleanup() {
    local pid
    for pid in ${shard_pids[@]+"${shard_pids[@]}"}; do
        kill "$pid" 2>/dev/null
    done
    for pid in ${shard_pids[@]+"${shard_pids[@]}"}; do
        wait "$pid" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

sanflags=()
case "$sanitize" in
ON | on | 1 | TRUE | true | YES | yes)
    sanflags=(-fsanitize=address,undefined -fno-omit-frame-pointer)
    ;;
esac

pass() {
    passed=$((passed + 1))
    echo "ok: $1"
}

fail() {
    failed=$((failed + 1))
    echo "FAIL: $1"
}

# Run "$@" with its output in $tmp/NAME.log; show the log when it fails.
run_logged() {
    local name=$1
    shift
    if "$@" >"$tmp/$name.log" 2>&1; then
        return 0
    fi
    echo "--- $name: $* failed; its output:"
    tail -n 40 "$tmp/$name.log"
    return 1
}

summary() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}

# ---- install ----

if ! run_logged install cmake --install "$build" --prefix "$prefix"; then
    fail "cmake --install $build --prefix \$tmp"
    summary
    exit 1
fi
pass "cmake --install"

libdir=$prefix/lib
[ -e "$libdir/libflps.so" ] || libdir=$prefix/lib64
missing=()
for f in include/flps.h "${libdir#"$prefix"/}/libflps.so" \
    "${libdir#"$prefix"/}/libflps.a" \
    "${libdir#"$prefix"/}/pkgconfig/flps.pc" \
    "${libdir#"$prefix"/}/cmake/flps/flpsConfig.cmake" bin/flps; do
    [ -e "$prefix/$f" ] || missing+=("$f")
done
if [ ${#missing[@]} -eq 0 ]; then
    pass "installed header, libraries, flps.pc, CMake package and bin/flps"
else
    fail "missing from the install: ${missing[*]}"
fi

# ---- what the shared library shows a user ----

if nm -D --defined-only "$libdir/libflps.so" >"$tmp/nm.log" 2>&1; then
    foreign=$(awk 'NF >= 3 && $3 !~ /^flps_/ { print $3 }' "$tmp/nm.log")
    exported=$(awk 'NF >= 3 && $3 ~ /^flps_/' "$tmp/nm.log" | wc -l)
    if [ -z "$foreign" ] && [ "$exported" -gt 0 ]; then
        pass "libflps.so exports only flps_ symbols ($exported)"
    else
        fail "libflps.so exports symbols outside the API: $(echo $foreign)"
    fi
else
    fail "nm -D libflps.so: $(cat "$tmp/nm.log")"
fi

# The defined global symbols of both libraries, as a program linking one
# sees them: the flps_ calls libflps.so exports and nothing else (no
# module's internal name, flps_ or not), but for what the toolchain itself
# defines in every shared object or sanitized build.
toolchain='^(_init|_fini|_edata|_end|__bss_start|__(odr_)?asan_.*|__ubsan_.*|__sancov_.*)$'
nm -D --defined-only "$libdir/libflps.so" 2>/dev/null |
    awk 'NF >= 3 && $3 ~ /^flps_/ { print $3 }' | sort -u >"$tmp/api.txt"
for lib in libflps.a libflps.so; do
    if ! nm -g --defined-only "$libdir/$lib" >"$tmp/nm-$lib.log" 2>&1; then
        fail "nm -g $lib: $(cat "$tmp/nm-$lib.log")"
        continue
    fi
    awk 'NF >= 3 { print $3 }' "$tmp/nm-$lib.log" | grep -Ev "$toolchain" |
        sort -u >"$tmp/globals-$lib.txt"
    extra=$(comm -23 "$tmp/globals-$lib.txt" "$tmp/api.txt")
    if [ -z "$extra" ] && [ -s "$tmp/api.txt" ] &&
        cmp -s "$tmp/globals-$lib.txt" "$tmp/api.txt"; then
        pass "$lib defines only the flps_ API as globals ($(wc -l <"$tmp/api.txt"))"
    else
        fail "$lib defines $(echo "$extra" | grep -c .) globals outside the API: $(echo $extra | cut -c 1-1500)"
    fi
done

if ldd "$libdir/libflps.so" >"$tmp/ldd.log" 2>&1; then
    bad=$(grep -Ei 'libyaml|libmicrohttpd|jansson|hiredis|curl' "$tmp/ldd.log")
    if [ -z "$bad" ]; then
        pass "libflps.so needs none of the daemons' libraries"
    else
        fail "libflps.so pulls in daemon libraries: $(echo $bad)"
    fi
else
    fail "ldd libflps.so: $(cat "$tmp/ldd.log")"
fi

# ---- building the example as a user would ----

example=$src/examples/c/train_loop.c
pcflags=$(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs flps)
if [ -z "$pcflags" ]; then
    fail "pkg-config --cflags --libs flps"
elif run_logged cc_pkgconfig cc -std=c11 -Wall -Wextra -Werror "${sanflags[@]}" \
    "$example" $pcflags -lm -o "$tmp/train_loop_pc"; then
    pass "train_loop.c builds with pkg-config"
else
    fail "train_loop.c does not build with \`pkg-config --cflags --libs flps\`"
fi

# One scratch CMake project per link: flps::flps, then flps::flps_static.
cmake_example() {
    local name=$1 static=$2
    run_logged "$name-configure" cmake -S "$src/examples/c" -B "$tmp/$name" \
        -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
        -DFLPS_EXAMPLE_STATIC="$static" \
        -DCMAKE_C_FLAGS="${sanflags[*]}" \
        -DCMAKE_EXE_LINKER_FLAGS="${sanflags[*]}" &&
        run_logged "$name-build" cmake --build "$tmp/$name"
}

if cmake_example cmake_shared OFF; then
    pass "examples/c builds with find_package(flps) and flps::flps"
else
    fail "examples/c does not build as a CMake project on flps::flps"
fi
if cmake_example cmake_static ON; then
    if ldd "$tmp/cmake_static/train_loop" | grep -q 'libflps\.so'; then
        fail "the flps::flps_static build still loads libflps.so"
    else
        pass "examples/c builds with flps::flps_static"
    fi
else
    fail "examples/c does not build as a CMake project on flps::flps_static"
fi

# ---- training against real shards ----

# Start two shards of job $1; their endpoints go into $endpoints.
endpoints=
start_shards() {
    local job=$1 i n ep list=
    local -a pids=()
    for i in 0 1; do
        "$build/bin/flps" --job "$job" --shard "$i" --shards 2 \
            --listen tcp://127.0.0.1:0 >"$tmp/$job-$i.out" \
            2>"$tmp/$job-$i.err" &
        pids+=($!)
        shard_pids+=($!)
    done
    for i in 0 1; do
        ep=
        for n in $(seq 100); do
            ep=$(sed -n 's/^listening on //p' "$tmp/$job-$i.out" | head -n 1)
            [ -n "$ep" ] && break
            kill -0 "${pids[$i]}" 2>/dev/null || break
            sleep 0.1
        done
        if [ -z "$ep" ]; then
            echo "--- shard $i of job $job did not start:"
            tail -n 20 "$tmp/$job-$i.err"
            return 1
        fi
        list=${list:+$list,}$ep
    done
    endpoints=$list
}

stop_shards() {
    local pid
    for pid in ${shard_pids[@]+"${shard_pids[@]}"}; do
        kill "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    shard_pids=()
}

# Train binary $2 with compression $3 on fresh shards of job $1.
train() {
    local job=$1 bin=$2 compression=$3 rc
    if [ ! -x "$bin" ]; then
        fail "$job: $bin was not built"
        return
    fi
    if ! start_shards "$job"; then
        fail "$job: the shards did not start"
        stop_shards
        return
    fi
    LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
        timeout 300 "$bin" --job "$job" --servers "$endpoints" \
        --compression "$compression" >"$tmp/$job.log" 2>&1
    rc=$?
    stop_shards
    if [ "$rc" -eq 0 ] && grep -q '^weight error .*: ok$' "$tmp/$job.log"; then
        pass "$job: $(grep '^weight error' "$tmp/$job.log")"
    else
        fail "$job: exit $rc"
        tail -n 20 "$tmp/$job.log"
    fi
}

train pkgconfig-topk "$tmp/train_loop_pc" topk:0.1
train cmake-dense "$tmp/cmake_shared/train_loop" dense
train static-topk "$tmp/cmake_static/train_loop" topk:0.1

summary
