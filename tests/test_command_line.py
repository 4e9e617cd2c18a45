"""app.py's flags for logins, admins, remote code, limits and the models folder: what they set, and the clear refusals
at startup (before any model is loaded)."""

import pytest

from app import model_settings, parse_args
from engines.model_files.model_args import ModelArgs
from limits import parse_size, size_text
from server import check_admins, limits_of, models_dir, page_rights, page_users
from webui.model_rights import ModelRights


def refusal(capsys, argv):
    with pytest.raises(SystemExit):
        parse_args(argv)
    return capsys.readouterr().err


def test_admin_without_auth_is_refused_and_says_why(capsys):
    message = refusal(capsys, ["--admin", "alice"])
    assert "--admin names users of --auth, and there is no --auth" in message and "is the admin already" in message


def test_several_users_from_auth_and_auth_file(tmp_path):
    users = tmp_path / "users.txt"
    users.write_text("# users\ncarol:pass:with:colons\n\n")
    args = parse_args(["--auth", "alice:a", "--auth", "bob:b", "--auth-file", str(users), "--admin", "alice"])
    assert page_users(args) == [("alice", "a"), ("bob", "b"), ("carol", "pass:with:colons")]
    assert page_users(parse_args([])) is None
    # The single form of before still works.
    assert page_users(parse_args(["--auth", "alice:a"])) == [("alice", "a")]


@pytest.mark.parametrize("argv, message", [
    (["--auth", "alice"], "--auth: write user:pass, both non-empty"),
    (["--auth", "alice:a", "--auth", "alice:b"], "--auth: the user alice is given twice"),
    (["--auth-file", "/no/such/file"], "--auth-file /no/such/file: No such file or directory"),
])
def test_bad_users_are_refused(argv, message):
    with pytest.raises(SystemExit, match=message):
        page_users(parse_args(argv))


def test_an_admin_must_be_a_user(capsys):
    users = [("alice", "a"), ("bob", "b")]
    with pytest.raises(SystemExit, match=r"--admin carol: not among the users of --auth/--auth-file \(alice, bob\)"):
        check_admins(ModelRights(admins=frozenset({"alice", "carol"})), users)
    check_admins(ModelRights(admins=frozenset({"alice"})), users)
    assert "Model management on the page: alice." in capsys.readouterr().out


def test_trust_remote_code_is_a_command_line_flag():
    assert model_settings(parse_args(["--trust-remote-code"]))["trust_remote_code"] is True
    assert model_settings(parse_args([]))["trust_remote_code"] is False


def test_a_setting_on_by_default_has_a_flag_to_turn_it_off_and_the_context_a_flag_to_set_it():
    assert "convert_weights" not in model_settings(parse_args([])), "left out: the setting's own default (on)"
    assert model_settings(parse_args(["--no-convert-weights"]))["convert_weights"] is False
    chosen = model_settings(parse_args(["--convert-weights", "--max-model-len", "2048"]))
    assert (chosen["convert_weights"], chosen["max_model_len"]) == (True, 2048)
    assert ModelArgs.build(**model_settings(parse_args(["--no-convert-weights"]))).convert_weights is False


def test_the_context_policy_is_left_to_each_door_unless_the_command_line_names_one():
    assert parse_args([]).context_policy is None, "the page and the terminal chat compact, the API refuses"
    assert parse_args(["--context-policy", "drop_oldest"]).context_policy == "drop_oldest"


def test_server_wide_flags_reach_every_load_from_the_page():
    args = parse_args(["--max-concurrent", "4", "--max-waiting", "7", "--served-model-name", "first"])
    rights = page_rights(args, users=None)
    loaded = rights.page_settings({"model_name_or_path": "other"})
    assert (loaded["max_concurrent"], loaded["max_waiting"]) == (4, 7)
    assert "served_model_name" not in loaded, "the command line's name is its own model's, not every model's"
    assert rights.page_settings({"max_concurrent": 2})["max_concurrent"] == 2, "the page's own choice comes first"
    assert page_rights(parse_args([]), None).page_settings({}) == {"trust_remote_code": False}


def test_limits_take_sizes_with_units(capsys):
    limits = limits_of(parse_args(["--max-upload-size", "2kb", "--max-request-size", "3MB", "--max-queue-size", "5"]))
    assert (limits.max_upload_size, limits.max_request_size, limits.max_queue_size) == (2048, 3 * 2**20, 5)
    assert limits.max_import_media_size == 100 * 2**20
    assert "'10xb' is not a size" in refusal(capsys, ["--max-upload-size", "10xb"])
    assert "'0' is not a positive whole number" in refusal(capsys, ["--max-queue-size", "0"])
    assert [parse_size(text) for text in ("900", "1kb", "2 GB")] == [900, 1024, 2 * 2**30]
    assert [size_text(size) for size in (900, 1536, 100 * 2**20)] == ["900 bytes", "1.5 KB", "100 MB"]


def test_the_models_folder_must_exist_when_named(tmp_path, monkeypatch):
    assert models_dir(parse_args(["--models-dir", str(tmp_path)])) == tmp_path
    with pytest.raises(SystemExit, match="--models-dir .*/missing is not a folder"):
        models_dir(parse_args(["--models-dir", str(tmp_path / "missing")]))
    # Unnamed, ./models is used where there is one.
    monkeypatch.chdir(tmp_path)
    assert models_dir(parse_args([])) is None
    (tmp_path / "models").mkdir()
    assert models_dir(parse_args([])).resolve() == tmp_path / "models"
