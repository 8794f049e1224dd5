"""pytest plugin: points python-etcd3's own test suite at the server under test.

The suite (from the etcd3 sdist on PyPI, run unmodified) builds most clients with
``etcd3.client()``, whose defaults are localhost:2379, and runs ``etcdctl`` without
endpoints. The kiln-store test runs one suite against etcd 3.4 and one against a 3-member
kiln-store on free ports, so this moves those defaults to ``KILN_ETCD_HOST`` and
``KILN_ETCD_PORT`` (etcdctl takes ``ETCDCTL_ENDPOINTS`` from the environment by itself).

``KILN_HYPOTHESIS_EXAMPLES``, when set, is how many inputs each property test tries (the
suite leaves hypothesis' default of 100): CI's time is short, and each input runs etcdctl.
The suite's own profile, registered when its module loads, inherits it.
"""

import os

import etcd3
from hypothesis import settings


def pytest_configure(config):
    defaults = list(etcd3.client.__defaults__)
    defaults[0] = os.environ["KILN_ETCD_HOST"]
    defaults[1] = int(os.environ["KILN_ETCD_PORT"])
    etcd3.client.__defaults__ = tuple(defaults)
    examples = os.environ.get("KILN_HYPOTHESIS_EXAMPLES")
    if examples:
        settings.register_profile("kiln", max_examples=int(examples))
        settings.load_profile("kiln")
