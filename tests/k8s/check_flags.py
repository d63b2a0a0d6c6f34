#!/usr/bin/env python3
"""Every flag deploy/k8s/configmap.yaml passes to `strata serve` is one strata has:
each --name appears in `strata serve --help`."""
import re
import subprocess
import sys

strata, configmap = sys.argv[1], sys.argv[2]
text = open(configmap).read()
flags = sorted(set(re.findall(r"--([a-z_]+)=", text)))
help_text = subprocess.run([strata, "serve", "--help"], capture_output=True, text=True).stdout
help_text += subprocess.run([strata, "serve", "--help"], capture_output=True, text=True).stderr
missing = [f for f in flags if not re.search(r"--%s(?![a-z_])" % re.escape(f), help_text)]
print("%d flags in %s; unknown to strata serve: %s" % (len(flags), configmap, missing or "none"))
sys.exit(1 if missing or not flags else 0)
