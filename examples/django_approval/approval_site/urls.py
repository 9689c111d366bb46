from django.contrib import admin
from django.contrib.staticfiles.views import serve
from django.urls import path, re_path

from complaints import views

urlpatterns = [
    path("admin/", admin.site.urls),  # toolnexus › pending requests: approve / decline
    # The admin's stylesheets and scripts, straight from the installed apps, also with DEBUG
    # off (runserver, gunicorn): fine for this example; a deployment runs collectstatic and
    # lets its web server send STATIC_ROOT.
    re_path(r"^static/(?P<path>.*)$", serve, {"insecure": True}),
    path("login/", views.sign_in),
    path("logout/", views.sign_out),
    path("complaints/", views.file_complaint),
    path("complaints/<int:complaint_id>/", views.show_complaint),
    path("answers/", views.answer),
    path("orders/", views.create_order),
    path("orders/<str:number>/", views.show_order),
]
