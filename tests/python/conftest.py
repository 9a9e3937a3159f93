import os

import pytest

os.environ.setdefault("ACCIO_QUIET", "1")

MECHANISMS = ["posix", "parallel", "direct", "uring", "auto"]


@pytest.fixture(params=MECHANISMS)
def mechanism(request):
    return request.param
