#!/bin/sh
# Runs inside the booted container as a oneshot unit: drives gpustats.service with systemctl on
# three host layouts, writes ROUND.KEY=VALUE lines to /results/report.txt for the test to read,
# then powers the container off.
#   bare:    no kubelet directories, the unit as shipped
#   relaxed: no kubelet directories, a drop-in with ProtectSystem=full (under "strict" systemd
#            drops the entry as redundant before it looks for the path)
#   kubelet: /var/lib/kubelet/pod-resources present
report=/results/report.txt
: >"$report"
say() { echo "$1.$2=$3" >>"$report"; }

readyz() {
    python3 - <<'PY'
import json, urllib.error, urllib.request
try:
    with urllib.request.urlopen("http://127.0.0.1:9477/readyz", timeout=5) as r:
        print(r.status, json.load(r).get("status"))
except (OSError, ValueError) as e:
    print("error", type(e).__name__)
PY
}

show() {   # show ROUND WHEN PROPERTY...
    round=$1; when=$2; shift 2
    for p in "$@"; do
        say "$round" "$when$p" "$(systemctl show -p "$p" --value gpustats.service)"
    done
}

round() {
    name=$1
    systemctl start gpustats.service; say "$name" start_rc $?
    show "$name" started_ ActiveState SubState Type
    pid=$(systemctl show -p MainPID --value gpustats.service)
    say "$name" readyz "$(readyz)"
    systemctl reload gpustats.service; say "$name" reload_rc $?
    logged=0
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        logged=$(journalctl -o cat _PID="$pid" | grep -c "SIGHUP: counters persisted")
        [ "$logged" -gt 0 ] && break
        sleep 1
    done
    say "$name" sighup_logged "$logged"
    [ "$(systemctl show -p MainPID --value gpustats.service)" = "$pid" ]; say "$name" pid_kept $?
    systemctl stop gpustats.service; say "$name" stop_rc $?
    show "$name" stopped_ ActiveState Result ExecMainStatus
    systemctl reset-failed gpustats.service 2>/dev/null
}

round bare
mkdir -p /run/systemd/system/gpustats.service.d
printf '[Service]\nProtectSystem=full\n' >/run/systemd/system/gpustats.service.d/relaxed.conf
systemctl daemon-reload
round relaxed
rm -r /run/systemd/system/gpustats.service.d
systemctl daemon-reload
mkdir -p /var/lib/kubelet/pod-resources
round kubelet
journalctl -b --no-pager -u gpustats.service >/results/journal.txt 2>&1
echo done=1 >>"$report"
systemctl poweroff --no-block
