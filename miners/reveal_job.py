"""A committed window's reveal, kept on disk until it is uploaded or too late to count.

Everything a miner must upload after its commit deadline lives in one folder per window, written
before the commitment goes on chain, so a miner killed at any moment loses neither the upload
nor the codec residual it committed to:

    reveals/w<window>/
        job.json              window, the anchored manifest's sha256, the outgoing residual's hash
        states/<step>.safetensors   the boundary states kept while training (`miners.kept_states`),
                                    until the challenge is drawn; then those a reveal can need
                                    (`RevealJob.prune`), a dropped one rebuilt first (`miners.rebuild`)
        states/trained.json   what the states were trained on and their committed hashes
        coded/<step>.safetensors    a challenged state coded against boundary 0, the window's base
                                    (`distrai.train.coded_state`), written by the uploader and uploaded
        update.blob           the update blob
        residual_in.tensors   the residual carried into the window, as revealed when challenged
        residual_out.safetensors    the residual the manifest commits to for the next window

`job.json` is written last and atomically: a folder without it was never committed and is removed.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from miners.kept_states import state_file, steps_on_disk

JOB_FILE = "job.json"


class JobRecord(BaseModel):
    """What `job.json` holds: the window and what its commitment anchored."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    window: int = Field(ge=0)
    manifest_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    residual_out_hash: str | None


@dataclass(frozen=True)
class RevealJob:
    window: int
    folder: Path
    manifest_sha256: str
    residual_out_hash: str | None

    @property
    def states(self) -> Path:
        return self.folder / "states"

    @property
    def steps(self) -> int:
        """h: the inner steps the window trained, the step of its last boundary state on disk."""
        steps = steps_on_disk(self.states)
        if not steps:
            raise FileNotFoundError(f"window {self.window}: no boundary state in {self.states}")
        return steps[-1]

    def state_path(self, step: int) -> Path:
        return state_file(self.states, step)

    def coded_state_path(self, step: int) -> Path:
        return self.folder / "coded" / f"{step:06d}.safetensors"

    @property
    def blob_path(self) -> Path:
        return self.folder / "update.blob"

    @property
    def residual_in_path(self) -> Path:
        return self.folder / "residual_in.tensors"

    @property
    def residual_out_path(self) -> Path:
        return self.folder / "residual_out.safetensors"

    def seal(self) -> None:
        """Write `job.json` atomically: from here the folder is a complete job."""
        record = JobRecord(
            window=self.window, manifest_sha256=self.manifest_sha256, residual_out_hash=self.residual_out_hash
        )
        tmp = self.folder / (JOB_FILE + ".tmp")
        tmp.write_text(record.model_dump_json())
        tmp.replace(self.folder / JOB_FILE)

    def prune(self, keep: list[int]) -> int:
        """Delete the boundary states a reveal cannot need, keeping `keep` (the challenged run
        starts), boundary 0 (what challenged states are coded against) and the last (the trajectory
        reveal's); returns how many were deleted. Once the challenge is drawn, the rest of the
        window's states are dead weight on disk while the next window trains beside them."""
        needed = {0, self.steps, *keep}
        gone = 0
        for path in self.states.glob("*.safetensors"):
            if path.stem.isdigit() and int(path.stem) not in needed:
                path.unlink(missing_ok=True)
                gone += 1
        return gone

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def job_folder(work_dir: Path, window: int) -> Path:
    return work_dir / "reveals" / f"w{window}"


def sealed_jobs(work_dir: Path) -> tuple[list[RevealJob], list[Path]]:
    """The sealed jobs under `work_dir`, oldest window first, and the folders that are not (left
    by a miner killed before its commitment, or unreadable), for the caller to remove."""
    root = work_dir / "reveals"
    jobs, unsealed = [], []
    for folder in sorted(root.iterdir()) if root.exists() else []:
        try:
            record = JobRecord.model_validate_json((folder / JOB_FILE).read_text())
        except (OSError, ValidationError):
            unsealed.append(folder)
            continue
        jobs.append(RevealJob(record.window, folder, record.manifest_sha256, record.residual_out_hash))
    return sorted(jobs, key=lambda j: j.window), unsealed
