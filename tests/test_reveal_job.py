"""A miner's reveal job record (`job.json`, `miners.reveal_job.JobRecord`): written by `seal` and read
back by `sealed_jobs` through one model; a folder whose record is missing or not one is handed back
as unsealed, and the others are still read."""

import json
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from miners.reveal_job import JOB_FILE, RevealJob, job_folder, sealed_jobs

HEX64 = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)


@given(
    window=st.integers(min_value=0, max_value=2**40),
    manifest=HEX64,
    residual=st.none() | st.text(alphabet=string.ascii_letters + string.digits, max_size=80),
)
def test_a_sealed_job_reads_back_equal(tmp_path_factory, window, manifest, residual):
    work = tmp_path_factory.mktemp("work")
    folder = job_folder(work, window)
    folder.mkdir(parents=True)
    job = RevealJob(window, folder, manifest, residual)
    job.seal()
    assert sealed_jobs(work) == ([job], [])
    assert not (folder / (JOB_FILE + ".tmp")).exists()


GOOD = {"window": 3, "manifest_sha256": "ab" * 32, "residual_out_hash": None}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        json.dumps({**GOOD, "window": -1}),
        json.dumps({**GOOD, "window": "3"}),
        json.dumps({**GOOD, "manifest_sha256": "AB" * 32}),
        json.dumps({**GOOD, "manifest_sha256": "ab" * 31}),
        json.dumps({**GOOD, "residual_out_hash": 7}),
        json.dumps({k: v for k, v in GOOD.items() if k != "residual_out_hash"}),
        json.dumps({**GOOD, "extra": 1}),
        json.dumps([GOOD]),
    ],
    ids=[
        "empty",
        "torn",
        "negative window",
        "window as text",
        "upper-case hash",
        "short hash",
        "residual hash a number",
        "residual hash missing",
        "unknown key",
        "not an object",
    ],
)
def test_a_folder_whose_record_is_not_one_is_unsealed_and_the_others_still_read(tmp_path, text):
    good = RevealJob(2, job_folder(tmp_path, 2), "cd" * 32, "r")
    good.folder.mkdir(parents=True)
    good.seal()
    bad = job_folder(tmp_path, 3)
    bad.mkdir(parents=True)
    (bad / JOB_FILE).write_text(text)
    never = job_folder(tmp_path, 4)
    never.mkdir(parents=True)
    assert sealed_jobs(tmp_path) == ([good], [bad, never])


def test_the_record_as_written_is_accepted(tmp_path):
    folder = job_folder(tmp_path, 3)
    folder.mkdir(parents=True)
    (folder / JOB_FILE).write_text(json.dumps(GOOD))
    assert sealed_jobs(tmp_path) == ([RevealJob(3, folder, "ab" * 32, None)], [])
