from django.apps import AppConfig


class ComplaintsConfig(AppConfig):
    name = "complaints"

    def ready(self) -> None:
        from toolnexus.django.approvals import request_answered

        from .views import record_answer

        # Answers given in the admin or by toolnexus_expire update the complaint too.
        request_answered.connect(record_answer, dispatch_uid="complaints.record_answer")
