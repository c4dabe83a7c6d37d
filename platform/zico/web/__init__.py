"""Server-rendered pages: sign-in, jobs, submit form, job detail, device timelines, cluster, tenant admin."""
