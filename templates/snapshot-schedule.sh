#!/bin/sh
# managed by kiln: scheduled snapshot bundles for hosts without systemd (the kiln-snapshot.timer unit does
# this elsewhere). Installed by `kiln snapshot schedule`, started with setsid (pid in
# /run/kiln/snapshot-schedule.pid) and again at boot by /etc/kiln/boot.sh. It sleeps in one-second steps and
# ends by itself when its configuration is gone (`kiln snapshot schedule --remove`, `kiln reset`).
conf=/etc/kiln/snapshot-schedule.conf
echo $$ > /run/kiln/snapshot-schedule.pid
trap 'exit 0' TERM INT
{% if next_command %}# a cron schedule: the first run at its next time, each later one at the time after the run
next=$({{ next_command }}) || exit 1
{% else %}# an interval: the first run at once
next=0
{% endif %}while [ -f "$conf" ]; do
  now=$(date +%s)
  if [ "$now" -ge "$next" ]; then
{% if next_command %}    {{ save_command }} >/dev/null 2>>/var/log/kiln/snapshot-schedule.err
    next=$({{ next_command }}) || exit 1
{% else %}    next=$((now + {{ every_secs }}))
    {{ save_command }} >/dev/null 2>>/var/log/kiln/snapshot-schedule.err
{% endif %}  fi
  sleep 1
done
