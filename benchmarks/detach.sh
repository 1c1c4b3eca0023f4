#!/usr/bin/env bash
# A GPU session longer than one device-tool call (10 minutes each, the machine kept warm ~30 s between calls):
#   bash benchmarks/detach.sh start CMD [ARG...]   start CMD detached from this call, then wait as below
#   bash benchmarks/detach.sh wait                 wait for it again (the next call, within ~30 s of the last)
# Each call waits up to WAIT seconds (default 540) for CMD to end, then packs what CMD wrote under $DOUT
# (/tmp/detach/out) with its log into $OUT/detach.tgz (the tool brings back at most 8 files from $OUT) and prints
# the log's tail and "DONE rc=N" once CMD has ended. CMD runs in this checkout under setsid; it writes its own
# exit status (a subshell of the first call would die with that call and never mark the end: 2026-12-06).
# Example: bash benchmarks/detach.sh start env OUT=/tmp/detach/out/ci STAGES="tune sweep" bash benchmarks/gpu_ci.sh
set -u
D=/tmp/detach
WAIT=${WAIT:-540}
case ${1:-} in
start)
  shift
  [ $# -gt 0 ] || { echo "detach.sh start: no command given" >&2; exit 2; }
  if [ -f $D/pid ] && kill -0 "$(cat $D/pid)" 2>/dev/null; then
    echo "detach.sh start: a command is still running (pid $(cat $D/pid)); 'wait' for it" >&2; exit 2
  fi
  rm -rf $D; mkdir -p $D/out
  DOUT=$D/out setsid nohup bash -c 'cd "$1" && shift && "$@" > '"$D"'/log 2>&1; echo $? > '"$D"'/rc.tmp; mv '"$D"'/rc.tmp '"$D"'/rc' \
    detach "$PWD" "$@" < /dev/null > /dev/null 2>&1 &
  echo $! > $D/pid
  echo "started: $*"
  ;;
wait) ;;
*) echo "usage: bash benchmarks/detach.sh start CMD [ARG...] | wait" >&2; exit 2 ;;
esac
[ -d $D ] || { echo "detach.sh: nothing was started on this machine (a new machine? start again)" >&2; exit 2; }
t=0
while [ ! -f $D/rc ] && [ "$t" -lt "$WAIT" ]; do sleep 5; t=$((t + 5)); done
tail -n 25 $D/log 2>/dev/null
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT" && tar czf "$OUT/detach.tgz" -C $D out log $( [ -f $D/rc ] && echo rc )
fi
if [ -f $D/rc ]; then echo "DONE rc=$(cat $D/rc)"; else echo "still running after ${t} s: call 'wait' again"; fi
