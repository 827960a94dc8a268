FROM astrocrpublic.azurecr.io/runtime:3.3-2-python-3.11
# Astro CLI project image (`astro dev start`, `astro deploy`): Astro Runtime 3.3 = Airflow 3.3,
# on Python 3.11 like requirements.txt. Keep the FROM line first: the Astro CLI reads it.
#
# The Runtime's ONBUILD steps (they run right after FROM) install packages.txt (a JDK: Spark 4
# needs Java 17+), then requirements.txt, then copy the project to /usr/local/airflow.
# requirements.txt pins apache-airflow==3.3.2: pick the Runtime 3.3-N whose Airflow is 3.3.2
# (`docker run --rm <image> airflow version`), or pip would try to replace it.
#
# docker-compose.yaml does not use this file; it builds docker/airflow.Dockerfile.

# sluice lives in include/ and is not installed as a distribution here: put it on the path of
# every process (Airflow components, tasks, and the spark-submit driver of the process task).
ENV PYTHONPATH=/usr/local/airflow/include
