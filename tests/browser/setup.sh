#!/usr/bin/env bash
# What tests/test_browser.py needs besides the Python packages (playwright is in the dev extra):
# Debian's Chromium, and the JavaScript bertviz's views load from CDNs (require.js, d3, jQuery),
# and MathJax 2, which the formgrader's pages load from cdnjs,
# from the npm registry into .browser-assets/ (git-ignored), so the test never goes online.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get install -y -q chromium || (apt-get update -q && apt-get install -y -q chromium)) >/dev/null
  else
    echo "Chromium is missing: run 'sudo apt-get install chromium' (the browser test will be skipped)" >&2
  fi
fi
ASSETS="${COURSE_BROWSER_ASSETS:-.browser-assets}"
mkdir -p "$ASSETS"
npm install --silent --no-save --no-audit --no-fund --prefix "$ASSETS" requirejs@2.3.6 d3@5.7.0 jquery@2.2.4 mathjax@2.7.7
echo "browser test ready: $(command -v chromium || echo 'no chromium'), assets in $ASSETS"
