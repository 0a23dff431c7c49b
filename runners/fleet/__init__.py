"""The queue side: a Celery worker that takes jobs from its queues, holds their lease, and leaves
without losing one.
"""
