"""Corpora shared by the BM25 tests: the contextual-retrieval codebase chunks and a synthetic Chinese corpus."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[3]
# shared/ sits beside the checkout; a git worktree one level deeper finds it one folder further up
DATA = next((d for d in (REPO.parent / "shared" / "data" / "contextual-retrieval",
                         REPO.parent.parent / "shared" / "data" / "contextual-retrieval") if d.exists()),
            REPO.parent / "shared" / "data" / "contextual-retrieval")

# words of a small technical/everyday Chinese vocabulary; documents are Zipf-weighted sentences of them
ZH_WORDS = (
    "检索 增强 生成 模型 向量 数据库 索引 查询 文档 知识库 分词 中文 英文 代码 函数 变量 错误 日志 服务器 客户端 "
    "网络 请求 响应 缓存 内存 磁盘 文件 目录 配置 参数 用户 权限 安全 加密 密码 登录 注册 页面 按钮 表格 图片 视频 音乐 "
    "天气 北京 上海 广州 深圳 杭州 火车 飞机 汽车 地铁 公交 医院 学校 老师 学生 考试 作业 图书馆 书籍 小说 历史 文化 "
    "经济 市场 公司 产品 价格 销售 客户 合同 会议 报告 计划 项目 团队 经理 员工 工资 时间 今天 明天 昨天 早上 晚上 "
    "吃饭 喝茶 咖啡 米饭 面条 水果 苹果 香蕉 西瓜 运动 跑步 游泳 足球 篮球 比赛 冠军 电影 演员 导演 音乐会 旅游 酒店 "
    "机场 护照 签证 银行 账户 转账 手机 电脑 软件 硬件 系统 升级 版本 测试 部署 监控 告警 性能 延迟 吞吐 算法 排序 "
    "搜索 推荐 广告 点击 转化 评估 指标 准确率 召回率 实验 论文 研究 科学 技术 发展 人工智能 机器学习 深度学习 神经网络"
).split()
ZH_GLUE = ["的", "了", "在", "和", "是", "我们", "可以", "需要", "通过", "进行"]


def chinese_corpus(n_docs: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(ZH_WORDS) + 1) ** 1.1
    weights /= weights.sum()
    docs = []
    for _ in range(n_docs):
        sentences = []
        for _ in range(rng.integers(1, 5)):
            words = rng.choice(ZH_WORDS, size=rng.integers(3, 12), p=weights)
            glue = rng.choice(ZH_GLUE, size=len(words))
            sentences.append("".join(w + g for w, g in zip(words, glue)) + "。")
        docs.append("".join(sentences))
    return docs


def chinese_queries(n: int, seed: int = 1) -> list[str]:
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(ZH_WORDS, size=rng.integers(1, 5))) for _ in range(n)]


def codebase_chunks() -> list[dict]:
    path = DATA / "codebase_chunks.json"
    if not path.exists():
        pytest.skip(f"{path} not present")
    docs = json.loads(path.read_text(encoding="utf-8"))
    return [
        {"id": f"{d['original_uuid']}:{c['original_index']}", "text": c["content"]} for d in docs for c in d["chunks"]
    ]


def codebase_queries(n: int) -> list[str]:
    path = DATA / "evaluation_set.jsonl"
    if not path.exists():
        pytest.skip(f"{path} not present")
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["query"] for line in lines[:n]]
