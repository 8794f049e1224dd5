#!/bin/sh
# managed by kiln: scheduled snapshot bundles for hosts without systemd (the kiln-snapshot.timer unit does
# this elsewhere). Installed by `kiln snapshot schedule`, started with setsid (pid in
# /run/kiln/snapshot-schedule.pid) and again at boot by /etc/kiln/boot.sh. It sleeps in one-second steps and
# ends by itself when its configuration is gone (`kiln snapshot schedule --remove`, `kiln reset`).
conf=/etc/kiln/snapshot-schedule.conf
echo $$ > /run/kiln/snapshot-schedule.pid
trap 'exit 0' TERM INT
next=0
while [ -f "$conf" ]; do
  now=$(date +%s)
  if [ "$now" -ge "$next" ]; then
    next=$((now + {{ every_secs }}))
    {{ save_command }} >/dev/null 2>>/var/log/kiln/snapshot-schedule.err
  fi
  sleep 1
done
