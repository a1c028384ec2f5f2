"""The operator console (`/console`): pages over the running services, for admins only.

`views.py` reads what each page shows (knowledge bases, files, jobs, a search as a chosen user,
metrics); `session.py` decides who may use it and guards its actions; `templates/` and `static/`
are its pages (Jinja2, escaped by default) and its one stylesheet and script. The routes are
`app/api/console.py`.
"""
