import os
import tempfile

import pytest

os.environ.setdefault("ACCIO_QUIET", "1")
# Profiles the tests write (accio tune) or rely on never come from or go to the user's cache.
os.environ["ACCIO_PROFILE_DIR"] = tempfile.mkdtemp(prefix="accio-test-profiles-")

MECHANISMS = ["posix", "parallel", "direct", "uring", "auto"]


@pytest.fixture(params=MECHANISMS)
def mechanism(request):
    return request.param
