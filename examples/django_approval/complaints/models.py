from django.conf import settings
from django.db import models


class Order(models.Model):
    number = models.CharField(max_length=20, unique=True)
    amount = models.DecimalField(max_digits=8, decimal_places=2)
    status = models.CharField(max_length=20, default="open")  # open | refunded


class Complaint(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="complaints")
    #: Who filed it (the project's login): nobody else reads or answers it.
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="complaints", null=True)
    text = models.TextField()
    status = models.CharField(max_length=20, default="new")  # new | answered | waiting
    reply = models.TextField(blank=True)
    #: The last approval request the team asked (open while ``status`` is waiting), and the
    #: handle that waits on it.
    request_id = models.CharField(max_length=64, blank=True, db_index=True)
    handle_id = models.CharField(max_length=200, blank=True)


class Refund(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="refunds")
    amount = models.DecimalField(max_digits=8, decimal_places=2)
