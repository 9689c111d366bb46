"""examples/flask_approval.py: the durable approval flow over HTTP, with Flask's test client."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flask")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "flask_approval.py"


def _load_example() -> Any:
    spec = importlib.util.spec_from_file_location("flask_approval_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = _load_example()


@pytest.fixture
def app() -> Any:
    app = example.create_app(generate=example.scripted_model(), authorize=example.signed_in)
    app.secret_key = "test-only"
    yield app
    app.extensions["toolnexus"].let_go(app)


def signed_in_as(app: Any, user: str) -> Any:
    client = app.test_client()
    with client.session_transaction() as session:
        session["user"] = user
    return client


@pytest.fixture
def client(app: Any) -> Any:
    return signed_in_as(app, "alice")


def start_refund(client: Any) -> tuple[str, dict[str, Any]]:
    started = client.post("/runs?wait=5", json={"prompt": "Please refund order A-1001."})
    assert started.status_code == 200, started.get_json()
    body = started.get_json()
    assert body["status"] == "pending"
    return body["run"], body["pending"]


def finished(client: Any, run: str) -> dict[str, Any]:
    shown = client.get(f"/runs/{run}?wait=5")
    assert shown.status_code == 200, shown.get_json()
    return dict(shown.get_json())


def test_pending_then_answer_then_done(client: Any) -> None:
    run, pending = start_refund(client)
    assert pending["kind"] == "approval"
    assert pending["prompt"] == "Refund 19.90 EUR on order A-1001?"
    assert pending["data"]["path"][0] == "root" and pending["data"]["order_id"] == "A-1001"
    assert set(pending) <= {"id", "kind", "prompt", "url", "data", "expiresAt"}

    shown = client.get(f"/runs/{run}")
    assert shown.status_code == 200 and shown.get_json()["pending"]["id"] == pending["id"]
    top = shown.get_json()["tree"][0]["id"]
    assert [h["id"] for h in shown.get_json()["tree"]] == [top, f"{top}/billing.1"] and top.startswith("root/support.")

    accepted = client.post(f"/runs/{run}/answer", json={"id": pending["id"], "ok": True})
    assert accepted.status_code == 202, accepted.get_json()
    body = finished(client, run)
    assert body["status"] == "done" and body["run"] == run
    assert body["result"]["status"] == "done"
    assert body["result"]["text"] == "Dear customer, refunded 19.90 EUR on order A-1001."


def test_wrong_answer_id_is_409_and_the_run_can_still_be_answered(client: Any) -> None:
    run, pending = start_refund(client)
    wrong = client.post(f"/runs/{run}/answer", json={"id": "req_not_this_one", "ok": True})
    assert wrong.status_code == 409
    assert "does not match" in wrong.get_json()["error"]
    assert wrong.get_json()["pending"]["id"] == pending["id"]

    assert client.post(f"/runs/{run}/answer", json={"id": pending["id"], "ok": True}).status_code == 202
    assert finished(client, run)["result"]["status"] == "done"


def test_an_answer_for_another_run_does_not_touch_it(client: Any) -> None:
    first, first_pending = start_refund(client)
    second, second_pending = start_refund(client)
    crossed = client.post(f"/runs/{first}/answer", json={"id": second_pending["id"], "ok": True})
    assert crossed.status_code == 409
    assert client.get(f"/runs/{second}").get_json()["status"] == "pending"  # still waiting
    for run, pending in ((first, first_pending), (second, second_pending)):
        assert client.post(f"/runs/{run}/answer", json={"id": pending["id"], "ok": True}).status_code == 202
        assert finished(client, run)["status"] == "done"


def test_decline(client: Any) -> None:
    run, pending = start_refund(client)
    declined = client.post(f"/runs/{run}/answer", json={"id": pending["id"], "ok": False, "reason": "declined"})
    assert declined.status_code == 202
    assert "declined: Refund 19.90 EUR" in finished(client, run)["result"]["text"]


def test_answering_a_finished_run_is_409(client: Any) -> None:
    run, pending = start_refund(client)
    assert client.post(f"/runs/{run}/answer", json={"id": pending["id"], "ok": True}).status_code == 202
    finished(client, run)
    again = client.post(f"/runs/{run}/answer", json={"id": pending["id"], "ok": True})
    assert again.status_code == 409


def test_unknown_run_is_404(client: Any) -> None:
    assert client.post("/runs/run_missing/answer", json={"id": "x", "ok": True}).status_code == 404
    assert client.get("/runs/run_missing").status_code == 404


def test_done_immediately_is_200(client: Any) -> None:
    quick = client.post("/runs?wait=5", json={"prompt": "Where is my parcel?"})
    assert quick.status_code == 200
    body = quick.get_json()
    assert body["status"] == "done" and body["result"]["text"].startswith("Dear customer")


@pytest.mark.parametrize("payload", [{"id": "x"}, {"id": "x", "ok": "yes"}, ["x"], "x"])
def test_malformed_answer_is_400(client: Any, payload: Any) -> None:
    run, _ = start_refund(client)
    response = client.post(f"/runs/{run}/answer", json=payload)
    assert response.status_code == 400


def test_missing_prompt_is_400_and_a_body_that_is_not_json_is_415(client: Any) -> None:
    assert client.post("/runs", json={}).status_code == 400
    assert client.post("/runs", data="not json").status_code == 415


def test_the_routes_ask_the_apps_login_and_a_run_is_its_starters_only(app: Any, client: Any) -> None:
    run, pending = start_refund(client)
    stranger, nobody = signed_in_as(app, "mallory"), app.test_client()
    assert nobody.post("/runs", json={"prompt": "Please refund order A-1001."}).status_code == 401
    assert stranger.get(f"/runs/{run}").status_code == 404
    assert stranger.post(f"/runs/{run}/answer", json={"id": pending["id"], "ok": True}).status_code == 404
    assert nobody.post(f"/runs/{run}/answer", json={"id": pending["id"], "ok": True}).status_code == 401
    assert client.get(f"/runs/{run}").get_json()["status"] == "pending"  # nothing changed


def test_without_authorize_the_app_refuses_to_start_unless_public() -> None:
    from toolnexus import ConfigError

    with pytest.raises(ConfigError, match="authorize="):
        example.create_app(generate=example.scripted_model())


def test_one_runtime_per_app_let_go_once(app: Any) -> None:
    ext = app.extensions["toolnexus"]
    with app.app_context():
        rt = ext.runtime()
        assert ext.runtime() is rt
    ext.let_go(app)
    ext.let_go(app)  # idempotent (the fixture lets go again)
    assert rt.inspect(rt.root).state == "closed"  # a memory-only runtime closes


def test_the_script_self_checks_and_prints_ok() -> None:
    proc = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=60, cwd=EXAMPLE.parent.parent)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("OK"), proc.stdout
