"""The pages' doctests run in a temporary folder, so that the files they write land there."""

import pytest


@pytest.fixture(autouse=True)
def _in_a_temporary_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
