"""The code ``ddltrace run --framework`` puts in front of the user's job: ``sitecustomize.py`` and the
``_ddltrace_*`` modules beside it. This folder is put first on the job's PYTHONPATH, so it runs inside the
job's own interpreter (often another virtual environment, without ddltrace installed): standard library only.
"""
