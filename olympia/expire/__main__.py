"""``python -m olympia.expire`` and ``spark-submit <site-packages>/olympia/expire/__main__.py``.

Example on a cluster (docs/EXPIRY.md has more)::

    spark-submit --master yarn --archives olympia-env.tar.gz#env \\
        --conf spark.pyspark.python=./env/bin/python \\
        <site-packages>/olympia/expire/__main__.py \\
        --catalog s3://bucket/catalog -o endpoint_url=https://s3.example --older-than 7d --json
"""

from olympia.cli.expire import job

if __name__ == "__main__":
    job(prog_name="python -m olympia.expire")
