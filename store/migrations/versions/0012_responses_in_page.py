"""Where a kept Responses API reply shows in its login's page, as a chat (--responses-in-page)."""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("api_responses") as table:
        table.add_column(sa.Column("chat_id", sa.String(64), nullable=True))
        table.add_column(sa.Column("first_message", ROW_ID, nullable=True))
        table.add_column(sa.Column("last_message", ROW_ID, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_responses") as table:
        table.drop_column("last_message")
        table.drop_column("first_message")
        table.drop_column("chat_id")
