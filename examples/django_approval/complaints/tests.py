"""``manage.py test``: a TestCase that runs the team. Inline, the run shares the test's
transaction: the tools see the rows the test made, and everything rolls back after it."""

from __future__ import annotations

from django.contrib.auth.models import Permission, User
from django.test import Client, TestCase, override_settings

from toolnexus.django.approvals import pending
from toolnexus.django.testing import override_runtime

from .agents import scripted_model
from .models import Complaint, Order, Refund

JSON = "application/json"
#: The tests' passwords need no strong hashing, which costs most of a second of CPU each
#: (Django's advice for faster tests).
FAST_PASSWORDS = override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"])


@FAST_PASSWORDS
class ComplaintTests(TestCase):
    def setUp(self) -> None:
        self.order = Order.objects.create(number="T-1", amount="12.00")  # exists only in this test's transaction
        self.user = User.objects.create_user("alice", password="alice-secret")
        self.client.force_login(self.user)

    def test_a_complaint_is_answered_from_the_tests_own_rows(self) -> None:
        with override_runtime(generate=scripted_model()):
            response = self.client.post("/complaints/", {"order": "T-1", "text": "The box was dented"}, content_type="application/json")
        self.assertEqual(response.status_code, 200, response.content)
        self.assertIn("The box was dented", response.json()["reply"])

    def test_a_small_refund_is_written_by_the_tool(self) -> None:
        with override_runtime(generate=scripted_model()):
            response = self.client.post("/complaints/", {"order": "T-1", "text": "Please refund me"}, content_type="application/json")
        self.assertEqual(response.json()["status"], "done", response.content)
        self.assertEqual(Refund.objects.filter(order=self.order).count(), 1)
        self.order.refresh_from_db()
        self.assertEqual(self.order.status, "refunded")

    def test_a_large_refund_waits_for_approval_then_goes_through(self) -> None:
        Order.objects.create(number="T-2", amount="80.00")
        with override_runtime(generate=scripted_model()):
            asked = self.client.post("/complaints/", {"order": "T-2", "text": "Refund please"}, content_type="application/json")
            self.assertEqual(asked.status_code, 202, asked.content)
            request_id = asked.json()["pending"]["id"]
            self.assertEqual(Refund.objects.count(), 0)
            done = self.client.post("/answers/", {"id": request_id, "ok": True}, content_type="application/json")
        self.assertEqual(done.status_code, 200, done.content)
        self.assertIn("refunded 80.00 EUR", done.json()["reply"])
        self.assertEqual(Refund.objects.filter(order__number="T-2").count(), 1)

    def test_answering_an_approval_again_is_409_as_in_the_flask_extension(self) -> None:
        Order.objects.create(number="T-4", amount="80.00")
        with override_runtime(generate=scripted_model()):
            asked = self.client.post("/complaints/", {"order": "T-4", "text": "Refund please"}, content_type=JSON)
            answer = {"id": asked.json()["pending"]["id"], "ok": True}
            self.assertEqual(self.client.post("/answers/", answer, content_type=JSON).status_code, 200)
            again = self.client.post("/answers/", answer, content_type=JSON)
        self.assertEqual(again.status_code, 409, again.content)
        self.assertIn("answered already", again.json()["error"])
        self.assertEqual(Refund.objects.filter(order__number="T-4").count(), 1)


@FAST_PASSWORDS
class WhoAsksTests(TestCase):
    """The views are behind the project's login; a complaint is its filer's only."""

    def setUp(self) -> None:
        Order.objects.create(number="T-4", amount="80.00")
        self.alice, self.mallory = Client(), Client()
        self.alice.force_login(User.objects.create_user("alice", password="alice-secret"))
        self.mallory.force_login(User.objects.create_user("mallory", password="mallory-secret"))

    def test_without_a_session_every_view_is_401_and_nothing_runs(self) -> None:
        anonymous = Client()
        with override_runtime(generate=scripted_model()):
            complained = anonymous.post("/complaints/", {"order": "T-4", "text": "x"}, content_type=JSON)
            answered = anonymous.post("/answers/", {"id": "req_x", "ok": True}, content_type=JSON)
            self.assertEqual((complained.status_code, answered.status_code), (401, 401))
            self.assertEqual(anonymous.get("/orders/T-4/").status_code, 401)
        self.assertEqual(Complaint.objects.count(), 0)

    def test_signing_in_with_the_projects_users(self) -> None:
        client = Client()
        wrong = client.post("/login/", {"username": "alice", "password": "nope"}, content_type="application/json")
        self.assertEqual(wrong.status_code, 401)
        right = client.post("/login/", {"username": "alice", "password": "alice-secret"}, content_type=JSON)
        self.assertEqual(right.json(), {"user": "alice"})
        self.assertEqual(client.get("/orders/T-4/").status_code, 200)

    def test_another_user_gets_404_for_a_complaint_and_its_approval_and_nothing_changes(self) -> None:
        with override_runtime(generate=scripted_model()):
            asked = self.alice.post("/complaints/", {"order": "T-4", "text": "Refund please"}, content_type=JSON)
            self.assertEqual(asked.status_code, 202, asked.content)
            complaint, request_id = asked.json()["complaint"], asked.json()["pending"]["id"]
            self.assertEqual(self.mallory.get(f"/complaints/{complaint}/").status_code, 404)
            stolen = self.mallory.post("/answers/", {"id": request_id, "ok": True}, content_type="application/json")
            self.assertEqual(stolen.status_code, 404)
            self.assertEqual(Refund.objects.count(), 0)
            self.assertEqual(self.alice.get(f"/complaints/{complaint}/").json()["status"], "waiting")
            done = self.alice.post("/answers/", {"id": request_id, "ok": True}, content_type="application/json")
        self.assertEqual(done.status_code, 200, done.content)
        self.assertEqual(Refund.objects.count(), 1)

    def test_a_body_that_is_not_json_is_415_and_nothing_runs(self) -> None:
        with override_runtime(generate=scripted_model()):
            for content_type in ("text/plain", "application/x-www-form-urlencoded"):
                response = self.alice.post("/complaints/", '{"order": "T-4", "text": "x"}', content_type=content_type)
                self.assertEqual(response.status_code, 415)
            form = self.alice.post("/complaints/", {"order": "T-4", "text": "x"})  # a form post
            self.assertEqual(form.status_code, 415)
        self.assertEqual(Complaint.objects.count(), 0)
        self.assertFalse(pending().exists())


@FAST_PASSWORDS
class PendingRequestAdminTests(TestCase):
    """The admin lists the runs' open requests; its actions answer them and the runs resume."""

    def setUp(self) -> None:
        Order.objects.create(number="T-3", amount="75.00")
        user = User.objects.create_superuser("admin", "admin@example.com", "secret")
        self.client.force_login(user)

    def ask(self, **settings: object) -> str:
        with self.settings(**settings):
            asked = self.client.post("/complaints/", {"order": "T-3", "text": "Refund please"}, content_type="application/json")
        self.assertEqual(asked.status_code, 202, asked.content)
        return str(asked.json()["pending"]["id"])

    def test_the_admin_pages_are_styled_their_static_files_are_served(self) -> None:
        page = self.client.get("/admin/toolnexus/pendingrequest/")
        self.assertContains(page, "/static/admin/css/base.css")
        stylesheet = self.client.get("/static/admin/css/base.css")
        self.assertEqual(stylesheet.status_code, 200)
        self.assertEqual(stylesheet["Content-Type"], "text/css")

    def test_approving_in_the_admin_resumes_the_run_and_records_it(self) -> None:
        with override_runtime(generate=scripted_model()):
            request_id = self.ask()
            listing = self.client.get("/admin/toolnexus/pendingrequest/")
            self.assertContains(listing, request_id)
            self.assertContains(listing, "Refund 75.00 EUR on order T-3?")
            self.client.post("/admin/toolnexus/pendingrequest/", {"action": "approve", "_selected_action": [request_id]})
        self.assertEqual(Refund.objects.filter(order__number="T-3").count(), 1)
        complaint = Complaint.objects.get(order__number="T-3")
        self.assertEqual((complaint.status, complaint.request_id), ("answered", request_id))
        self.assertIn("refunded 75.00 EUR", complaint.reply)
        self.assertFalse(pending().exists())

    def test_declining_in_the_admin_resumes_the_run_without_a_refund(self) -> None:
        with override_runtime(generate=scripted_model()):
            request_id = self.ask()
            self.client.post("/admin/toolnexus/pendingrequest/", {"action": "decline", "_selected_action": [request_id]})
        self.assertEqual(Refund.objects.count(), 0)
        self.assertIn("declined: Refund 75.00 EUR", Complaint.objects.get(order__number="T-3").reply)

    def test_an_expired_request_is_answered_expired_when_the_admin_lists_requests(self) -> None:
        with override_runtime(generate=scripted_model()):
            request_id = self.ask(APPROVAL_TTL=-1)
            listing = self.client.get("/admin/toolnexus/pendingrequest/", follow=True)
            self.assertNotContains(listing, "Refund 75.00 EUR on order T-3?")
            self.assertContains(listing, request_id)  # named in the message saying it expired
        self.assertEqual(Refund.objects.count(), 0)
        self.assertIn("expired: Refund 75.00 EUR", Complaint.objects.get(order__number="T-3").reply)
        again = self.client.post("/answers/", {"id": request_id, "ok": True}, content_type="application/json")
        self.assertEqual(again.status_code, 409)  # answered already: expired

    def test_a_staff_user_who_may_only_view_the_list_answers_nothing_not_even_the_expired(self) -> None:
        viewer = User.objects.create_user("viewer", password="viewer-secret", is_staff=True)
        viewer.user_permissions.add(Permission.objects.get(codename="view_pendingrequest"))
        with override_runtime(generate=scripted_model()):
            request_id = self.ask(APPROVAL_TTL=-1)  # already past its expiry
            self.client.force_login(viewer)
            self.assertContains(self.client.get("/admin/toolnexus/pendingrequest/"), request_id)
            approve = {"action": "approve", "_selected_action": [request_id]}
            self.client.post("/admin/toolnexus/pendingrequest/", approve)
            self.assertTrue(pending().filter(request_id=request_id).exists())  # still open: nothing was answered
        self.assertEqual(Refund.objects.count(), 0)
        self.assertEqual(Complaint.objects.get(order__number="T-3").status, "waiting")
