#!/usr/bin/env bash
# Renders index.html in headless Chromium: the DOM after rendering must hold
# the tables and charts, and a screenshot is written next to the report.
#   render_chromium.sh REPORT_DIR
set -euo pipefail
dir=$(cd "$1" && pwd)
chrome=$(command -v chromium || command -v chromium-browser || true)
[[ -n $chrome ]] || { echo "FAIL: chromium is not installed (scripts/bootstrap.sh installs Debian's chromium)"; exit 1; }
flags=(--headless --no-sandbox --disable-gpu --disable-dev-shm-usage --disable-quic --no-first-run
       --disable-background-networking --disable-component-update --disable-sync --user-data-dir="$(mktemp -d)")
timeout 120 "$chrome" "${flags[@]}" --dump-dom "file://$dir/index.html" > "$dir/dom.html" 2> "$dir/chromium.log"
tables=$(grep -o '<table' "$dir/dom.html" | wc -l)
charts=$(grep -o '<svg' "$dir/dom.html" | wc -l)
echo "rendered DOM: $tables tables, $charts charts"
[[ $tables -ge 5 && $charts -ge 8 ]] || { echo "FAIL: the page did not render its tables and charts"; exit 1; }
timeout 120 "$chrome" "${flags[@]}" --window-size=1280,2400 --screenshot="$dir/screenshot.png" "file://$dir/index.html" \
  >> "$dir/chromium.log" 2>&1
size=$(stat -c %s "$dir/screenshot.png")
echo "screenshot: $dir/screenshot.png ($size bytes)"
[[ $size -gt 20000 ]] || { echo "FAIL: the screenshot is nearly empty"; exit 1; }
