#!/usr/bin/env bash
# Writes the King James Version of the Bible as plain text (one "Book N" line per chapter,
# "  N text" per verse) from Debian's bible-kjv packages: the training text of the built-in
# model (model/builtin/train.py). The KJV text is in the public domain (see the package's
# copyright file: "The copyright for the King James Version text of the Bible is expired").
# Usage: model/builtin/kjv_text.sh OUT.txt   (needs apt-get download: no root, no install)
set -euo pipefail
out=$(realpath -m "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
apt-get download bible-kjv bible-kjv-text >/dev/null 2>&1
for deb in *.deb; do dpkg-deb -x "$deb" root; done
root/usr/bin/bible -p root/usr/lib gen1:1-rev22:21 >"$out"
echo "wrote $(wc -c <"$out") bytes of KJV text to $out (bible-kjv-text $(dpkg-deb -f bible-kjv-text_*.deb Version))"
