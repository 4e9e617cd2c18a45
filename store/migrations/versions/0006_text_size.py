"""Each chat's and preset's count of the text it holds, for the per-user quota (store/quota.py),
counted for the rows already there as the store counts them."""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("chats", "presets"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("text_size", sa.BigInteger, nullable=False, server_default="0"))
    op.execute("""UPDATE chats SET text_size =
        coalesce(length(title), 0) + coalesce(length(system), 0) + coalesce(length(tools), 0)
        + coalesce(length(CAST(generation AS TEXT)), 0)
        + coalesce((SELECT sum(coalesce(length(content), 0) + coalesce(length(CAST(data AS TEXT)), 0))
                    FROM messages WHERE messages.chat_id = chats.id), 0)""")
    op.execute("UPDATE presets SET text_size = coalesce(length(system), 0) + coalesce(length(CAST(generation AS TEXT)), 0)")


def downgrade() -> None:
    for table in ("chats", "presets"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("text_size")
