# A pytest plugin (`-p kiln_e2e_plugin`, this directory on PYTHONPATH) that lets the vendored upstream suite
# run unmodified against the pip-installed client.
#
# Why: the suite imports itself as `kubernetes.e2e_test` (`from kubernetes.e2e_test import base`), but PyPI's
# `kubernetes` wheel does not ship that subpackage. Rather than edit the vendored files, this adds the vendored
# `upstream/kubernetes` directory to the installed package's search path, so `kubernetes.e2e_test` resolves to
# `upstream/kubernetes/e2e_test` while everything else still comes from the pinned wheel.
import os

import kubernetes

_HERE = os.path.dirname(os.path.abspath(__file__))
_VENDORED = os.path.join(_HERE, "upstream", "kubernetes")

if _VENDORED not in kubernetes.__path__:
    kubernetes.__path__.append(_VENDORED)
