"""Real-service fixtures: Redis, SeaweedFS S3, Celery worker subprocesses on free loopback ports."""
