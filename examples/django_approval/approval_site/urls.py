from django.contrib import admin
from django.urls import path

from complaints import views

urlpatterns = [
    path("admin/", admin.site.urls),  # toolnexus › pending requests: approve / decline
    path("login/", views.sign_in),
    path("logout/", views.sign_out),
    path("complaints/", views.file_complaint),
    path("complaints/<int:complaint_id>/", views.show_complaint),
    path("answers/", views.answer),
    path("orders/", views.create_order),
    path("orders/<str:number>/", views.show_order),
]
