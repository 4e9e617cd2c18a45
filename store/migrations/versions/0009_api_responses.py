"""Replies of the Responses API kept for a later request to go on from (previous_response_id)."""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_responses",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("previous", sa.String(64), nullable=True),
        sa.Column("messages", sa.JSON, nullable=False),
        sa.Column("response", sa.JSON, nullable=False),
        sa.Column("characters", sa.BigInteger, nullable=False),
        sa.Column("created", sa.Float, nullable=False),
    )
    op.create_index("ix_api_responses_owner", "api_responses", ["owner"])


def downgrade() -> None:
    op.drop_table("api_responses")
