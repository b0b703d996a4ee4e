"""Which weights a run served (tasks/evidence/revision.py): a commit is pinned, a branch or tag moves;
the commit served comes from the engine's reported revision, a snapshot path, or the weights' hash."""

from tasks.evidence.revision import revision_identity

COMMIT = "89abcdef0123456789abcdef0123456789abcdef"


def test_a_configured_commit_is_pinned_whatever_the_engine_says():
    rec = revision_identity({"model": {"revision": COMMIT}}, None)
    assert (rec["moving"], rec["served"], rec["identity"]) == (False, None, COMMIT)


def test_main_is_moving_and_the_snapshot_path_names_what_was_served():
    served = {"revision": "main", "model_path": f"/hf/models--o--m/snapshots/{COMMIT}/", "source": ["GET /v1/models root"]}
    rec = revision_identity({"model": {"revision": "main"}}, served)
    assert rec["moving"] and rec["served"] == COMMIT and rec["identity"] == COMMIT
    assert rec["reported_revision"] == "main" and rec["asked"] == ["GET /v1/models root"]


def test_a_tag_with_nothing_reported_is_moving_and_unknown():
    rec = revision_identity({"model": {"revision": "v1.0"}}, {"revision": None, "model_path": "org/model"})
    assert rec["moving"] and rec["served"] is None and rec["identity"] is None


def test_a_weights_file_hash_identifies_a_local_gguf():
    rec = revision_identity({"model": {"revision": "Q4_1"}}, {"weights_sha256": "ab" * 32})
    assert rec["moving"] and rec["served"] == "sha256:" + "ab" * 32 and rec["identity"] == rec["served"]
