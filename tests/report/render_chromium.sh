#!/usr/bin/env bash
# Renders index.html in headless Chromium: the DOM after rendering must hold
# the tables and charts; at 1400 x 900 the verdict table starts in the first
# screen with its first row (a failure, when a run failed) visible and fits
# the width, and so does every job's run table; screenshots (first screen, whole page) are written next to the
# report.
#   render_chromium.sh REPORT_DIR [--expect-failure-first]
set -euo pipefail
dir=$(cd "$1" && pwd)
chrome=$(command -v chromium || command -v chromium-browser || true)
[[ -n $chrome ]] || { echo "FAIL: chromium is not installed (scripts/test.sh installs Debian's chromium)"; exit 1; }
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

# The first screen, measured by the browser's layout: a copy of the page with a
# script that writes the verdict table's box into the DOM Chromium dumps.
python3 - "$dir/index.html" "$dir/first-screen.html" <<'PY'
import sys
page = open(sys.argv[1], encoding="utf-8").read()
probe = ("<script>(function(){var h=document.getElementById('verdicts');if(!h)return;"
         "var t=h.nextElementSibling.querySelector('table');var rows=t.querySelectorAll('tbody tr');"
         "var first=rows.length?rows[0]:t;var b=t.getBoundingClientRect();"
         "document.body.setAttribute('data-first-screen',[Math.round(h.getBoundingClientRect().top),"
         "Math.round(first.getBoundingClientRect().bottom),Math.round(b.right),window.innerWidth,window.innerHeight,"
         "rows.length,rows.length?(rows[0].className||'ok'):'none',"
         "Math.max(0,...Array.from(document.querySelectorAll('h3[id^=runs-]')).map(function(r){"
         "return Math.round(r.nextElementSibling.getBoundingClientRect().right);}))].join(' '));})();</script>")
open(sys.argv[2], "w", encoding="utf-8").write(page.replace("</body>", probe + "</body>"))
PY
read -r top first_bottom right width height rows first_class runs_right < <(timeout 120 "$chrome" "${flags[@]}" --window-size=1400,900 \
  --dump-dom "file://$dir/first-screen.html" 2>> "$dir/chromium.log" | grep -o 'data-first-screen="[^"]*"' | cut -d'"' -f2)
echo "first screen ${width}x${height}: verdict table from y=$top, its first row ($first_class) ends at y=$first_bottom, right edge x=$right, $rows rows"
[[ -n ${top:-} ]] || { echo "FAIL: no verdict table (#verdicts) in the page"; exit 1; }
(( top < height && first_bottom <= height )) || { echo "FAIL: the verdict table's first row is below the first screen"; exit 1; }
(( right <= width )) || { echo "FAIL: the verdict table is wider than a 1400 px window"; exit 1; }
# Each job's run table too: its decision column was cut off behind a scroll bar (issue 66).
echo "run tables: right edge x=$runs_right"
(( runs_right <= width )) || { echo "FAIL: a run table is wider than a 1400 px window (x=$runs_right)"; exit 1; }
if [[ ${2:-} == --expect-failure-first && $first_class != failed ]]; then
  echo "FAIL: a run failed but the first verdict row is '$first_class'"; exit 1
fi
timeout 120 "$chrome" "${flags[@]}" --window-size=1400,900 --hide-scrollbars --screenshot="$dir/first-screen.png" \
  "file://$dir/index.html" >> "$dir/chromium.log" 2>&1
echo "first screen: $dir/first-screen.png"
echo PASS
